package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
)

// metric is E2B's SandboxMetric as the SDK reads it.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// TestE2BSandboxMetrics: a sandbox's metrics (the SDK's get_metrics) are a sample read from
// its container now, in E2B's SandboxMetric shape: its CPUs, memory and home's disk, the disk
// growing with what a command writes; GET /sandboxes/metrics names the key's own sandboxes
// only, and another key gets 404 for this one's.
func TestE2BSandboxMetrics(t *testing.T) {
	c := e2bDaemon(t, "alice", "bob")
	alice, bob := c["alice"], c["bob"]
	ctx := t.Context()
	sb, err := alice.Create(ctx, map[string]any{"templateID": "base", "timeout": 300})
	if err != nil {
		t.Fatal(err)
	}
	read := func() metric {
		t.Helper()
		var got []metric
		if _, err := alice.Control(ctx, http.MethodGet, "/sandboxes/"+sb.SandboxID+"/metrics", nil, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("metrics: %d samples, want the one read now", len(got))
		}
		return got[0]
	}
	before := read()
	if before.CPUCount < 1 || before.MemTotal < 64<<20 || before.MemUsed <= 0 || before.DiskTotal < 1<<20 ||
		before.CPUUsedPct < 0 || before.CPUUsedPct > 100 || time.Since(before.Timestamp) > time.Minute ||
		before.Timestamp.Unix() != before.TimestampUnix {
		t.Fatalf("a sample: %+v", before)
	}
	res, err := alice.Conn(sb.SandboxID, sb.EnvdAccessToken).Run(ctx, "head -c 4194304 /dev/urandom > blob && sync", nil, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("writing 4 MiB: %+v, %v", res, err)
	}
	if after := read(); after.DiskUsed < before.DiskUsed+4<<20 {
		t.Fatalf("the home's disk used %d bytes before 4 MiB were written, %d after", before.DiskUsed, after.DiskUsed)
	}

	var many struct {
		Sandboxes map[string]metric `json:"sandboxes"`
	}
	if _, err := alice.Control(ctx, http.MethodGet, "/sandboxes/metrics?sandbox_ids="+sb.SandboxID+",nope", nil, &many); err != nil {
		t.Fatal(err)
	}
	if m, ok := many.Sandboxes[sb.SandboxID]; len(many.Sandboxes) != 1 || !ok || m.MemTotal != before.MemTotal {
		t.Fatalf("metrics of many: %+v", many)
	}
	if _, err := bob.Control(ctx, http.MethodGet, "/sandboxes/"+sb.SandboxID+"/metrics", nil, nil); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("another key's metrics of this sandbox: %v", err)
	}
	many.Sandboxes = nil
	if _, err := bob.Control(ctx, http.MethodGet, "/sandboxes/metrics?sandbox_ids="+sb.SandboxID, nil, &many); err != nil || len(many.Sandboxes) != 0 {
		t.Fatalf("another key's metrics of many: %+v, %v", many, err)
	}
}
