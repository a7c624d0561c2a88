package bench

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestTailKeepsTheEnd(t *testing.T) {
	var all bytes.Buffer
	tl := &tail{max: 8, w: &all}
	for _, s := range []string{"hello ", "world", ", and more"} {
		tl.Write([]byte(s))
	}
	if got := tl.String(); got != "and more" {
		t.Errorf("tail = %q, want the last 8 bytes", got)
	}
	if all.String() != "hello world, and more" {
		t.Errorf("passed on %q", all.String())
	}
}

func TestDaemonStartAndStop(t *testing.T) {
	dir := t.TempDir()
	// A stand-in daemon: it records its arguments and waits for SIGTERM.
	script := `echo "$BENCH_TEST_VAR $@" > ` + dir + `/args; echo started; trap 'exit 0' TERM; while :; do sleep 0.05; done`
	t.Setenv("BENCH_TEST_VAR", "inherited")
	d, err := startDaemon([]string{"sh", "-c", script, "serve"}, []string{"BENCH_TEST_VAR=added"}, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var args []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if args, _ = os.ReadFile(dir + "/args"); len(args) > 0 {
			break
		}
	}
	want := "added --data-dir=" + dir + " --listen=" + d.addr
	if strings.TrimSpace(string(args)) != want || !strings.HasPrefix(d.addr, "127.0.0.1:") {
		t.Errorf("the daemon got %q, want %q", args, want)
	}
	if d.exited() {
		t.Fatal("the daemon exited early")
	}
	if err := d.stop(10 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	if !d.exited() || !strings.Contains(d.log.String(), "started") {
		t.Errorf("after stop: exited %v, log %q", d.exited(), d.log.String())
	}
}

func TestDaemonKilledWhenItIgnoresSIGTERM(t *testing.T) {
	d, err := startDaemon([]string{"sh", "-c", `trap '' TERM; while :; do sleep 0.05; done`, "serve"}, nil, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the shell set its trap
	if err := d.stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("stop of a daemon that ignores SIGTERM: %v", err)
	}
	if !strings.Contains(d.exitError().Error(), "killed") {
		t.Errorf("exitError: %v", d.exitError())
	}
}

func TestReadRSSOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc on this system")
	}
	rss, err := readRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Errorf("this process's RSS is %d bytes, below 1 MiB", rss)
	}
}

func TestParseProcStat(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 250 and 50 ticks; the name holds a space and a ')'.
	stat := "4242 (sandpit (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 100 1000000 2000 18446744073709551615\n"
	got, err := parseProcStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Errorf("parseProcStat = %v, want 3s (300 ticks)", got)
	}
	for _, bad := range []string{"", "4242 (sandpit) S 1 2 3", "4242 (sandpit) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 50 0"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) gave no error", bad)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if _, err := processCPUTime(os.Getpid()); err != nil {
			t.Errorf("processCPUTime of this process: %v", err)
		}
	}
}

func TestCPUPerRun(t *testing.T) {
	cases := []struct {
		before, after time.Duration
		runs          int
		want          float64
	}{
		{time.Second, 2 * time.Second, 100, 10},
		{0, 25 * time.Millisecond, 3, 8.33},
		{-1, time.Second, 10, 0}, // not read
		{time.Second, 2 * time.Second, 0, 0},
		{2 * time.Second, time.Second, 10, 0}, // a counter that went back (a new container)
	}
	for _, c := range cases {
		if got := cpuPerRun(c.before, c.after, c.runs); got != c.want {
			t.Errorf("cpuPerRun(%v, %v, %d) = %v, want %v", c.before, c.after, c.runs, got, c.want)
		}
	}
}
