package app

import (
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/config"
)

// TestWarmCheckCountsSlots: the warm containers' check counts the slots' containers, one per
// slot of the daemon when one answers, and names the sessions' beside them (a trial's doctor
// said "8 running, one per slot" with 4 slots and 4 sessions, and "6 running" with 2 slots up).
func TestWarmCheckCountsSlots(t *testing.T) {
	box := func(id, state, slot string) container.Summary {
		labels := map[string]string{"dev.sandpit.managed": "true"}
		if slot != "" {
			labels["dev.sandpit.slot"] = slot
		}
		return container.Summary{ID: id, State: container.ContainerState(state), Labels: labels}
	}
	sessions := []container.Summary{box("s1", "running", ""), box("s2", "running", ""), box("s3", "running", ""), box("s4", "running", "")}
	four := append([]container.Summary{box("a", "running", "0"), box("b", "running", "1"), box("c", "running", "2"), box("d", "running", "3")}, sessions...)
	two := append([]container.Summary{box("a", "running", "0"), box("b", "running", "1"), box("c", "exited", "2")}, sessions...)
	cfg := config.Default()
	cfg.Slots = 4
	daemon := daemonView{url: "http://d", limits: &apitype.Limits{Slots: 2}}
	for _, c := range []struct {
		name    string
		list    []container.Summary
		d       daemonView
		ok      bool
		detail  string
		running int
	}{
		{"four slots, four sessions", four, daemonView{}, true, "4 running, one per slot (besides them, 4 container(s) of sessions)", 4},
		{"two of four slots up", two, daemonView{}, false, "2 of 4 running (besides them, 4 container(s) of sessions)", 2},
		{"the daemon's two slots", two, daemon, true, "2 running, one per slot", 2},
		{"sessions only", sessions, daemonView{}, false, "not running (besides them, 4 container(s) of sessions)", 0},
	} {
		got, running := warmCheck(c.list, nil, cfg, c.d)
		if got.OK != c.ok || !strings.HasPrefix(got.Detail, c.detail) || len(running) != c.running {
			t.Errorf("%s: ok %t, %q, %d running; want ok %t, %q, %d", c.name, got.OK, got.Detail, len(running), c.ok, c.detail, c.running)
		}
	}
}
