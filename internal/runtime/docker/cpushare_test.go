package docker_test

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// TestSessionsShareTheCPUByAgent: the session containers' CPU shares follow their agents (an
// agent's sessions together weigh one slot's 1024), changed in place on the running
// containers, and a weighed session still runs.
func TestSessionsShareTheCPUByAgent(t *testing.T) {
	e := startSessions(t, session.Config{})
	kim1 := e.create(t, "kim", nil)
	kim2 := e.create(t, "kim", nil)
	e.create(t, "lee", nil)
	shares := func() []int64 {
		ids, err := e.rt.SessionContainers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, id := range ids {
			c, err := api.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
			if cerrdefs.IsNotFound(err) {
				continue // a closed session's container, removed since the list
			}
			if err != nil {
				t.Fatal(err)
			}
			// 0 is the engine's default, the kernel's 1024 (sandbox.DefaultCPUWeight): a box
			// the daemon never weighed, as an agent's lone session's is.
			got = append(got, cmp.Or(c.Container.HostConfig.CPUShares, sandbox.DefaultCPUWeight))
		}
		slices.Sort(got)
		return got
	}
	waitShares := func(want ...int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for got := shares(); !slices.Equal(got, want); got = shares() {
			if time.Now().After(deadline) {
				t.Fatalf("the session containers' CPU shares are %v, want %v", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitShares(512, 512, 1024)
	e.mustCall(t, kim2, "print(sum(range(1000)))")
	if _, err := kim1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitShares(1024, 1024)
}
