package sandboxtest

// The cases of stdout and stderr: their order, their caps, streaming while the run goes and
// their text (H2–H4, H12, H24).

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestStdoutAndStderrKeepTheirOrder: writes to sys.stdout and sys.stderr keep their order.
func (s *Suite) TestStdoutAndStderrKeepTheirOrder(t *testing.T) {
	type event struct {
		stream sandbox.Stream
		data   string
	}
	collect := func(code string) ([]event, sandbox.Result) {
		var mu sync.Mutex
		var events []event
		res := Exec(t, s.rt, 0, Spec(code, 10*time.Second), func(e sandbox.Event) {
			mu.Lock()
			defer mu.Unlock()
			if n := len(events); n > 0 && events[n-1].stream == e.Stream {
				events[n-1].data += e.Data
			} else {
				events = append(events, event{e.Stream, e.Data})
			}
		})
		return events, res
	}
	for i := range 30 {
		events, res := collect("print('greetings from stdout!')\nraise ValueError('hello from stderr!')")
		expect(t, res, sandbox.OutcomeError)
		if len(events) != 2 || events[0] != (event{"stdout", "greetings from stdout!\n"}) || !strings.Contains(events[1].data, "hello from stderr!") {
			t.Fatalf("run %d: events %q, want stdout's line, then the traceback", i, events)
		}
	}
	// The streams are still what python3 -u gives.
	res := Exec(t, s.rt, 0, Spec("import sys\nfor s in (sys.stdout, sys.stderr):\n    print(s.name, s.mode, s.buffer.mode, s.write_through, s.line_buffering, s.encoding, s.errors, s.fileno(), s is getattr(sys, '__%s__' % s.name[1:-1]))", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if want := "<stdout> w wb True False utf-8 surrogateescape 1 True\n<stderr> w wb True False utf-8 backslashreplace 2 True\n"; res.Stdout != want {
		t.Fatalf("streams %q, want %q", res.Stdout, want)
	}
	events, res := collect("import sys\nfor i in range(100):\n    print(i)\n    print(-i, file=sys.stderr)\n    sys.stderr.buffer.write(b'.\\n')")
	expect(t, res, sandbox.OutcomeOK)
	if len(events) != 200 {
		t.Fatalf("%d events, want 200 alternating stdout and stderr: %q", len(events), events)
	}
	for i, e := range events {
		want := event{"stdout", fmt.Sprintf("%d\n", i/2)}
		if i%2 == 1 {
			want = event{"stderr", fmt.Sprintf("%d\n.\n", -(i / 2))}
		}
		if e != want {
			t.Fatalf("event %d is %q, want %q", i, e, want)
		}
	}
}

// TestH2OutputBeforeAKillIsKept: H2 output before a kill is kept.
func (s *Suite) TestH2OutputBeforeAKillIsKept(t *testing.T) {
	// 5 s: a cold start on a loaded machine took more than 2 of them before the print (CI).
	res := Exec(t, s.rt, 0, Spec("print('step 1'); import time; time.sleep(60)", 5*time.Second), nil)
	expect(t, res, sandbox.OutcomeTimeout)
	if res.Stdout != "step 1\n" {
		t.Fatalf("stdout %q, want %q", res.Stdout, "step 1\n")
	}
}

// TestH3EndlessOutputHitsTheCap: H3 endless output hits the cap.
func (s *Suite) TestH3EndlessOutputHitsTheCap(t *testing.T) {
	spec := Spec("while True: print('y')", 30*time.Second)
	if s.SlowWrites {
		// Every write is a trip through the sandbox's kernel: a 1 MiB cap of two-byte prints
		// took more than two minutes on a 2-CPU machine under gVisor's ptrace platform.
		spec.TimeoutMS, spec.Limits.StdoutBytes = (2 * time.Minute).Milliseconds(), 128<<10
	}
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOutputLimit)
	if !res.StdoutTruncated || int64(len(res.Stdout)) != spec.Limits.StdoutBytes {
		t.Fatalf("truncated %v, %d bytes of stdout, want exactly the cap %d", res.StdoutTruncated, len(res.Stdout), spec.Limits.StdoutBytes)
	}
	s.nextRunOK(t)
}

// TestH4SmallStdoutCapIsNamed: H4 small stdout cap is named.
func (s *Suite) TestH4SmallStdoutCapIsNamed(t *testing.T) {
	spec := Spec("for i in range(3000): print(i)", 10*time.Second)
	spec.Limits.StdoutBytes = 1024
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOutputLimit)
	if len(res.Stdout) != 1024 || !res.StdoutTruncated || !strings.HasPrefix(res.Stdout, "0\n1\n2\n") {
		t.Fatalf("stdout %d bytes truncated=%v", len(res.Stdout), res.StdoutTruncated)
	}
	if !strings.Contains(res.Reason, "1024 bytes") {
		t.Fatalf("reason %q does not name the cap", res.Reason)
	}
}

// TestStdoutCapCutsOnACharacterBoundary: stdout cap cuts on a character boundary.
func (s *Suite) TestStdoutCapCutsOnACharacterBoundary(t *testing.T) {
	spec := Spec("print('é' * 1000)", 10*time.Second)
	spec.Limits.StdoutBytes = 101
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOutputLimit)
	if res.Stdout != strings.Repeat("é", 50) {
		t.Fatalf("stdout %q, want 50 whole characters", res.Stdout)
	}
}

// TestH12StreamingWhileRunning: H12 streaming while running.
func (s *Suite) TestH12StreamingWhileRunning(t *testing.T) {
	var mu sync.Mutex
	var events []time.Time
	start := time.Now()
	res := Exec(t, s.rt, 0, Spec("import time\nwhile True: print('.', flush=True); time.sleep(1)", 3*time.Second), func(e sandbox.Event) {
		mu.Lock()
		events = append(events, time.Now())
		mu.Unlock()
	})
	expect(t, res, sandbox.OutcomeTimeout)
	if n := strings.Count(res.Stdout, "."); n < 2 || n > 4 {
		t.Fatalf("stdout %q: want the 2 to 4 dots printed before the kill", res.Stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[0].Sub(start) > 2*time.Second {
		t.Fatalf("first event came %v after the start; want it while the run was going", events)
	}
}

// TestH24UTF8ByteExact: H24 UTF-8 byte-exact.
func (s *Suite) TestH24UTF8ByteExact(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("print('测试 😀')", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "测试 😀\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// TestInvalidUTF8IsReplaced: invalid UTF-8 is replaced.
func (s *Suite) TestInvalidUTF8IsReplaced(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import sys; sys.stdout.buffer.write(b'a\\xffb\\xe6\\xb5'); sys.stdout.flush()", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "a\uFFFDb\uFFFD" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}
