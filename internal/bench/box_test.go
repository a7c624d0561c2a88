package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
)

func TestParseProcStatus(t *testing.T) {
	status := "Name:\tsandpit\nState:\tS (sleeping)\nVmPeak:\t 1300000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   30720 kB\n" +
		"RssAnon:\t   10240 kB\nRssFile:\t   20480 kB\nRssShmem:\t       0 kB\nThreads:\t9\n"
	m, err := parseProcStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if want := (procMemory{rss: 30 << 20, peak: 40 << 20, anon: 10 << 20, file: 20 << 20}); m != want {
		t.Errorf("parseProcStatus = %+v, want %+v", m, want)
	}
	for _, bad := range []string{
		"Name:\tkthreadd\nState:\tS (sleeping)\n", // no VmRSS
		"VmRSS:\t 12 MB\n",
		"VmRSS:\t twelve kB\n",
	} {
		if _, err := parseProcStatus([]byte(bad)); err == nil {
			t.Errorf("parseProcStatus(%q) gave no error", bad)
		}
	}
}

func TestMemoryUsageAsDockerStats(t *testing.T) {
	cases := []struct {
		name string
		m    container.MemoryStats
		want int64
	}{
		{"cgroup v1 without the inactive file cache", container.MemoryStats{Usage: 100, Stats: map[string]uint64{"total_inactive_file": 30, "inactive_file": 5}}, 70},
		{"cgroup v2 without the inactive file cache", container.MemoryStats{Usage: 100, Stats: map[string]uint64{"inactive_file": 40}}, 60},
		{"a cache larger than the usage is ignored", container.MemoryStats{Usage: 100, Stats: map[string]uint64{"total_inactive_file": 300}}, 100},
		{"no stats", container.MemoryStats{Usage: 100}, 100},
	}
	for _, c := range cases {
		if got := memoryUsage(c.m); got != c.want {
			t.Errorf("%s: memoryUsage = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestParseSpawnTime(t *testing.T) {
	got, err := parseSpawnTime([]byte(`{"durations_ns":[1000000,2500000]}`+"\n"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != time.Millisecond || got[1] != 2500*time.Microsecond {
		t.Errorf("parseSpawnTime = %v", got)
	}
	if _, err := parseSpawnTime([]byte(`{"durations_ns":[1]}`), 2); err == nil || !strings.Contains(err.Error(), "1 durations, want 2") {
		t.Errorf("a short list: %v", err)
	}
	if _, err := parseSpawnTime([]byte("usage: sandpit-executor serve"), 1); err == nil {
		t.Error("no error for output that is not JSON")
	}
}
