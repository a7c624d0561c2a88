package bench

import (
	"os/exec"
	"strings"
	"testing"
)

func TestParseForkFloor(t *testing.T) {
	out := `{"server": {"pid": 26, "rss_bytes": 142606336, "pss_bytes": 90177536, "anon_bytes": 97517568, "children": 1, "group_pss_bytes": null},
		"probe": {"preloaded": ["numpy"], "skipped": {"nope": "ModuleNotFoundError: No module named 'nope'"}, "import_ms": 812.5,
		          "rss_bytes": 52428800, "pss_bytes": 31457280, "anon_bytes": 20971520, "mappings": 400},
		"forks": 4, "fork_cpu_ns": 40000000, "cpu_source": "cgroup v1", "fork_rusage_ns": 30000000,
		"fork_wall_ns": [9000000, 11000000, 10000000, 12000000]}`
	f, server, err := parseForkFloor([]byte(out), "label", []string{"numpy", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if f.Label != "label" || len(f.Modules) != 2 || len(f.Preloaded) != 1 || f.Skipped["nope"] == "" || f.ImportMS != 812.5 ||
		f.RSS != 50<<20 || f.PSS != 30<<20 || f.Anon != 20<<20 || f.Mappings != 400 || f.Forks != 4 ||
		f.CPUMSPerFork != 10 || f.CPUSource != "cgroup v1" || f.RusageMSPerFork != 7.5 || f.WallP50MS != 10 {
		t.Errorf("parseForkFloor = %+v", f)
	}
	if server == nil || server.PID != 26 || server.RSS != 136<<20 || server.GroupPSS != 0 || server.Children != 1 {
		t.Errorf("server = %+v", server)
	}
	for _, bad := range []string{
		"Traceback (most recent call last):",
		`{"server": null, "probe": {}, "forks": 2, "fork_wall_ns": [1]}`,
		`{"server": null, "probe": {}, "forks": 0, "fork_wall_ns": []}`,
	} {
		if _, _, err := parseForkFloor([]byte(bad), "x", nil); err == nil {
			t.Errorf("parseForkFloor(%q) gave no error", bad)
		}
	}
}

// TestForkFloorScript runs forkfloor.py with the host's python3, outside a box: it finds no
// fork server, imports what it can, skips what it cannot, and times its forks.
func TestForkFloorScript(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	out, err := exec.Command(python, "-u", "-I", "-X", "utf8", "-c", forkFloorScript, "/nonexistent/executor.pid",
		"/nonexistent/bootstrap.py", "5", "json", "no_such_module_for_sandpit").Output()
	if err != nil {
		t.Fatalf("forkfloor.py: %v", err)
	}
	f, server, err := parseForkFloor(out, "host", []string{"json", "no_such_module_for_sandpit"})
	if err != nil {
		t.Fatal(err)
	}
	if server != nil {
		t.Errorf("a fork server was found without an executor: %+v", server)
	}
	if len(f.Preloaded) != 1 || f.Preloaded[0] != "json" || !strings.Contains(f.Skipped["no_such_module_for_sandpit"], "ModuleNotFoundError") {
		t.Errorf("preloaded %v, skipped %v", f.Preloaded, f.Skipped)
	}
	if f.Forks != 5 || !(f.CPUMSPerFork > 0) || !(f.WallP50MS > 0) || f.RSS <= 0 || f.Mappings <= 0 || f.CPUSource == "" {
		t.Errorf("fork floor = %+v", f)
	}
}
