package app

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv/pgtest"
)

// TestDaemonIDInUse: a daemon_id whose daemon sent a heartbeat within the lease from another
// address is refused (two live daemons with one ID recorded each other's runs as interrupted);
// the same address (a restart) is let in.
func TestDaemonIDInUse(t *testing.T) {
	st, err := store.OpenPostgres(t.Context(), pgtest.URL(t), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.SetDaemon("d1")
	if err := st.Heartbeat(t.Context(), "host-a:8765"); err != nil {
		t.Fatal(err)
	}
	if err := checkDaemonID(t.Context(), st, "d1", "host-b:8765"); err == nil || !strings.Contains(err.Error(), "host-a:8765") ||
		!strings.Contains(err.Error(), "daemon_id") {
		t.Errorf("a live daemon's ID from another address: %v, want a refusal naming it", err)
	}
	if err := checkDaemonID(t.Context(), st, "d1", "host-a:8765"); err != nil {
		t.Errorf("a restart at its own address: %v", err)
	}
	if err := checkDaemonID(t.Context(), st, "d2", "host-b:8765"); err != nil {
		t.Errorf("a new ID: %v", err)
	}
}

// TestAdvertised: a wildcard listen address is named by this machine's name.
func TestAdvertised(t *testing.T) {
	name, _ := os.Hostname()
	for listen, want := range map[string]string{
		"0.0.0.0:8765":    net.JoinHostPort(name, "8765"),
		"[::]:8765":       net.JoinHostPort(name, "8765"),
		":8765":           net.JoinHostPort(name, "8765"),
		"10.0.0.5:8765":   "10.0.0.5:8765",
		"127.0.0.1:8765":  "127.0.0.1:8765",
		"sandpit.lan:443": "sandpit.lan:443",
	} {
		if got := Advertised(listen); got != want {
			t.Errorf("Advertised(%q) = %q, want %q", listen, got, want)
		}
	}
}
