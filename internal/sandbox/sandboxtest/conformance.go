// Package sandboxtest is the conformance suite that every sandbox.Runtime passes: the
// in-process pipe runtime (executor over net.Pipe with the host's python3) and the Docker
// runtime. Its cases are the hostile and accidental inputs of docs/hostile-cases.md that a
// runtime alone decides (H1–H8, H11–H14, H18, H20, H24, H29, H32–H34), and concurrent runs
// attacking each other (H25–H27), plus the isolation rules and the runs' input and output
// files (files.go).
package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Harness is what the suite needs from a runtime under test.
type Harness struct {
	// Runtime is the runtime under test, with at least Slots slots, already ready.
	Runtime sandbox.Runtime
	// Slots is how many slots the runtime serves (at least 2).
	Slots int
	// HasModule reports whether the box's python can import a module (numpy for H13).
	HasModule func(name string) bool
	// ReadOnlyRoot is true when the box's root filesystem is read-only (H19).
	ReadOnlyRoot bool
	// SlowWrites is true when every write is a round trip through a user-space kernel (gVisor
	// on its ptrace platform, about 100 µs a write): the H3 print loop then takes about 50 s,
	// not under one, to reach its cap, and gets that time.
	SlowWrites bool
	// IsolatedSlots is true when every slot is its own sandbox (network namespace, /tmp,
	// memory): the cases of runs reaching each other's sockets and files then run.
	IsolatedSlots bool
	// Start, when set, is how every run that starts must have been started ("fork" or
	// "cold"): the suite then proves that path, not a fallback. Wait until the runtime's
	// runs start that way before calling Run (see WaitForStart).
	Start string
}

// startChecker is a Runtime whose runs fail with an error when they started another way than
// start.
type startChecker struct {
	sandbox.Runtime
	start string
}

func (c startChecker) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	res, err := c.Runtime.Run(ctx, slot, spec, emit)
	if err == nil && res.Start != "" && res.Start != c.start {
		return res, fmt.Errorf("the run started %q, want %q (outcome %s: %s)", res.Start, c.start, res.Outcome, res.Reason)
	}
	return res, err
}

// WaitForStart runs print(1) in slot 0 until a run starts the way start says ("fork": once
// the fork server is ready), failing the test after timeout.
func WaitForStart(t *testing.T, rt sandbox.Runtime, start string, timeout time.Duration) {
	t.Helper()
	WaitForStartInSlots(t, rt, 1, start, timeout)
}

// WaitForStartInSlots is WaitForStart for each of slots 0 to slots-1: a runtime whose slots
// are sandboxes of their own has a fork server in each.
func WaitForStartInSlots(t *testing.T, rt sandbox.Runtime, slots int, start string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for slot := range slots {
		for {
			res := Exec(t, rt, slot, Spec("print(1)", 10*time.Second), nil)
			if res.Start == start {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("runs in slot %d still start %q after %s, want %q", slot, res.Start, timeout, start)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Limits are the per-run limits the suite's specs use unless a case says otherwise.
func Limits() sandbox.Limits {
	l := sandbox.DefaultConfig().Limits
	return l
}

// Spec returns a spec for code with the default limits.
func Spec(code string, timeout time.Duration) sandbox.Spec {
	return sandbox.Spec{ID: sandbox.NewID(), Code: code, Input: json.RawMessage("null"),
		TimeoutMS: timeout.Milliseconds(), Limits: Limits()}
}

// Exec runs spec in slot with an outer deadline of its timeout plus 10 s and fails the test on
// a runtime error.
func Exec(t *testing.T, rt sandbox.Runtime, slot int, spec sandbox.Spec, emit func(sandbox.Event)) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(spec.TimeoutMS)*time.Millisecond+10*time.Second)
	defer cancel()
	res, err := rt.Run(ctx, slot, spec, emit)
	if err != nil {
		t.Fatalf("Run(%q): system error: %v", spec.Code, err)
	}
	return res
}

// noOutput reports whether res carries no OUTPUT.
func noOutput(res sandbox.Result) bool {
	return len(res.Output) == 0 || string(res.Output) == "null"
}

// sameJSON reports whether got is the JSON text want, up to insignificant space.
func sameJSON(got json.RawMessage, want string) bool {
	var a, b bytes.Buffer
	return json.Compact(&a, got) == nil && json.Compact(&b, []byte(want)) == nil && a.String() == b.String()
}

func expect(t *testing.T, res sandbox.Result, outcome sandbox.Outcome) {
	t.Helper()
	if res.Outcome != outcome {
		t.Fatalf("outcome = %q (reason %q, exit %d, signal %d), want %q\nstdout: %.500q\nstderr: %.2000q",
			res.Outcome, res.Reason, res.ExitCode, res.Signal, outcome, res.Stdout, res.Stderr)
	}
}

// countOwnProcesses prints how many processes (zombies included) the run's uid has, by their
// real uid (an undumpable process's /proc directory belongs to root).
const countOwnProcesses = `import os
me, n = str(os.getuid()), 0
for p in os.listdir('/proc'):
    try:
        n += p.isdigit() and any(l.split()[1] == me for l in open('/proc/%s/status' % p) if l.startswith('Uid:'))
    except OSError:
        pass
print(n)`

// ipcLeaver creates a System V shared memory segment and message queue and a POSIX message
// queue, and leaves them behind.
const ipcLeaver = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(0x5eed, 1 << 20, 0o1666) >= 0, ctypes.get_errno()
assert libc.msgget(0x5eed, 0o1666) >= 0, ctypes.get_errno()
if os.path.isdir('/dev/mqueue'):
    libc.mq_open.restype = ctypes.c_int
    libc.mq_open(b'/sandpit-leak', os.O_CREAT | os.O_RDWR, 0o666, None)`

// ipcFinder looks for what ipcLeaver left.
const ipcFinder = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print('shm', libc.shmget(0x5eed, 0, 0) >= 0)
print('msg', libc.msgget(0x5eed, 0) >= 0)
print('mqueue', os.path.exists('/dev/mqueue/sandpit-leak'))`

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	rt := h.Runtime
	if h.Start != "" {
		rt = startChecker{rt, h.Start}
	}
	ok := func(t *testing.T) {
		t.Helper()
		start := time.Now()
		res := Exec(t, rt, 0, Spec("print(1)", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "1\n" {
			t.Fatalf("next run: stdout %q, want %q", res.Stdout, "1\n")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("next run took %s", d)
		}
	}

	t.Run("H8 json stdout", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import json; print(json.dumps({'a': 1}))", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "{\"a\": 1}\n" || res.ExitCode != 0 || !res.StartedAt.After(time.Time{}) {
			t.Fatalf("stdout %q exit %d started %v", res.Stdout, res.ExitCode, res.StartedAt)
		}
	})

	t.Run("INPUT and OUTPUT", func(t *testing.T) {
		spec := Spec("OUTPUT = {'n': len(INPUT), 'sum': sum(INPUT)}", 10*time.Second)
		spec.Input = json.RawMessage(`[1, 2, 3]`)
		res := Exec(t, rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeOK)
		var out map[string]int
		if err := json.Unmarshal(res.Output, &out); err != nil || out["n"] != 3 || out["sum"] != 6 {
			t.Fatalf("output %s (%v)", res.Output, err)
		}
	})

	t.Run("no OUTPUT gives no output", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("x = 1", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if len(res.Output) != 0 && string(res.Output) != "null" {
			t.Fatalf("output %s, want none", res.Output)
		}
	})

	t.Run("unserialisable OUTPUT is an error that says so", func(t *testing.T) {
		for code, says := range map[string]string{
			"OUTPUT = {1, 2}":                       "set is not JSON serializable",
			"OUTPUT = float('nan')":                 "Out of range float values",
			"OUTPUT = []\nOUTPUT.append(OUTPUT)":    "Circular reference",
			"OUTPUT = {'a': [1, 2, {'b': {3, 4}}]}": "set is not JSON serializable",
		} {
			res := Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeError)
			if !strings.Contains(res.Stderr, "OUTPUT is not JSON-serialisable") || !strings.Contains(res.Stderr, says) {
				t.Fatalf("%s: stderr %q does not explain", code, res.Stderr)
			}
		}
	})

	t.Run("OUTPUT over its cap", func(t *testing.T) {
		spec := Spec("OUTPUT = 'x' * 5000", 10*time.Second)
		spec.Limits.OutputBytes = 1024
		res := Exec(t, rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeOutputLimit)
		if !strings.Contains(res.Reason, "1024") {
			t.Fatalf("reason %q does not name the cap", res.Reason)
		}
	})

	t.Run("huge OUTPUT stops at the cap without eating memory", func(t *testing.T) {
		for _, code := range []string{`OUTPUT = "x" * (200 * 2**20)`, `OUTPUT = ["x" * 1000] * (300 * 1024)`} {
			res := Exec(t, rt, 0, Spec(code, 30*time.Second), nil)
			expect(t, res, sandbox.OutcomeOutputLimit)
			if !strings.Contains(res.Reason, "cap of 1048576 bytes") {
				t.Fatalf("%s: reason %q", code, res.Reason)
			}
		}
	})

	t.Run("user code cannot break the bootstrap's reporting", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import json, os, sys\njson.dumps = lambda *a, **k: 1/0\nos.write = None\nsys.exit = None\nOUTPUT = {'ok': True}", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if string(res.Output) != `{"ok": true}` && string(res.Output) != `{"ok":true}` {
			t.Fatalf("output %s", res.Output)
		}
		res = Exec(t, rt, 0, Spec("import os\nos.close(3)\nOUTPUT = 1", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Stderr, "descriptor 3") {
			t.Fatalf("stderr %q does not explain", res.Stderr)
		}
	})

	t.Run("JSON nested past the limit neither leaves the sandbox nor breaks the session", func(t *testing.T) {
		// Python's JSON reader fails near 1000 levels, the session's at 10 000: OUTPUT and
		// agent.* arguments are held to the 500 levels an input may have.
		res := Exec(t, rt, 0, Spec("v = 1\nfor _ in range(600): v = [v]\nOUTPUT = v", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Reason+res.Stderr, "nests 600 levels deep; the limit is 500") || !noOutput(res) {
			t.Fatalf("deep OUTPUT: reason %q stderr %q output %.80s", res.Reason, res.Stderr, res.Output)
		}
		code := "import os\ndeep = b'[' * 1000 + b']' * 1000\n" +
			"os.write(3, b'{\"type\":\"call\",\"method\":\"log\",\"args\":' + deep + b'}\\n')\n" +
			"print(os.read(3, 1000).decode().strip())"
		res = Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if !strings.Contains(res.Stdout, "nest 1000 levels deep; the limit is 500") {
			t.Fatalf("deep call arguments: stdout %q", res.Stdout)
		}
		ok(t)
	})

	t.Run("a signal the program sends itself is not a limit", func(t *testing.T) {
		// SIGXCPU is what the CPU-time limit sends; sent by the program, it is a plain kill.
		res := Exec(t, rt, 0, Spec("import os, signal; os.kill(os.getpid(), signal.SIGXCPU)", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeKilled)
		if res.Signal != 24 || !strings.Contains(res.Reason, "SIGXCPU") {
			t.Fatalf("signal %d reason %q", res.Signal, res.Reason)
		}
	})

	t.Run("H29 the program's frames on descriptor 3 do not decide its outcome", func(t *testing.T) {
		for _, code := range []string{
			`import os; os.write(3, b'{"type":"memory_error"}\n')`,
			`import os; os.write(3, b'{"type":"output_too_large","bytes":123456789012}\n')`,
			`import os; os.write(3, b'{"type":"output","bytes":123456789012}\n')`,
			"import os\ntry:\n    os.write(3, b'{\"type\":\"call\",\"method\":\"log\",\"args\":' + b'x' * (4 << 20) + b'}\\n')\nexcept OSError:\n    pass",
			`import os, threading; threading.Thread(target=os.write, args=(3, b'{"type":"memory_error"}\n')).start()`,
		} {
			res := Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeOK)
			if res.ExitCode != 0 || res.Reason != "" || !noOutput(res) {
				t.Fatalf("%s: exit %d reason %q output %s", code, res.ExitCode, res.Reason, res.Output)
			}
		}
		// A real MemoryError, which only the interpreter sees, still counts, in any thread: the
		// run's status is then 1.
		res := Exec(t, rt, 0, Spec("import threading\ndef f():\n    b = bytearray(2**40)\nth = threading.Thread(target=f)\nth.start()\nth.join()\nprint('main done')", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeMemoryLimit)
		if res.ExitCode != 1 || res.Stdout != "main done\n" || !strings.Contains(res.Stderr, "MemoryError") {
			t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		// OUTPUT sent by hand is held to the same rules as the bootstrap's.
		res = Exec(t, rt, 0, Spec(`import os; d = b'{"a": 1, "a": 2}'; os.write(3, b'{"type":"output","bytes":%d}\n' % len(d) + d)`, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Reason, `the name "a" twice`) || !noOutput(res) {
			t.Fatalf("reason %q output %s", res.Reason, res.Output)
		}
		// Bytes the program sends itself count against the OUTPUT cap as OUTPUT would.
		spec := Spec(`import os; os.write(3, b'{"type":"output","bytes":5000}\n' + b'"' + b'x' * 4998 + b'"')`, 10*time.Second)
		spec.Limits.OutputBytes = 1024
		expect(t, Exec(t, rt, 0, spec, nil), sandbox.OutcomeOutputLimit)
	})

	t.Run("H32 OUTPUT is read when a plain interpreter would finish", func(t *testing.T) {
		for code, want := range map[string]string{
			"import threading, time\nresults = []\ndef work(i):\n    time.sleep(0.1)\n    results.append(i)\n" +
				"threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]\nfor th in threads:\n    th.start()\n    time.sleep(0.01)\nOUTPUT = results": `[0, 1, 2]`,
			"import threading, time\nOUTPUT = {}\nthreading.Thread(target=lambda: (time.sleep(0.1), OUTPUT.update(late=True))).start()": `{"late": true}`,
			"import atexit\nOUTPUT = {'n': 1}\natexit.register(lambda: OUTPUT.update(n=2))":                                             `{"n": 2}`,
			"import atexit\ndef last():\n    global OUTPUT\n    OUTPUT = 'set at exit'\natexit.register(last)":                          `"set at exit"`,
			// A forked child that ends the program too does not send its own OUTPUT.
			"import os\npid = os.fork()\nOUTPUT = 'child' if pid == 0 else 'parent'\nif pid:\n    os.waitpid(pid, 0)": `"parent"`,
		} {
			res := Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeOK)
			if !sameJSON(res.Output, want) {
				t.Errorf("%s:\noutput %s, want %s", code, res.Output, want)
			}
		}
	})

	t.Run("H33 keys that become the same JSON name are an error naming the key", func(t *testing.T) {
		for code, says := range map[string]string{
			`OUTPUT = {1: "first", "1": "second"}`:           `become the JSON name "1"`,
			`OUTPUT = {"a": [{"x": 0, True: 1, "true": 2}]}`: `become the JSON name "true"`,
			`OUTPUT = {"k": {None: 1, "null": 2}}`:           `become the JSON name "null"`,
			`OUTPUT = [{2.5: "a", "2.5": "b"}]`:              `become the JSON name "2.5"`,
			"OUTPUT = {'x' * 3000: [{1: 'a', '1': 'b'}]} ":   `become the JSON name "1"`,
		} {
			spec := Spec(code, 10*time.Second)
			res := Exec(t, rt, 0, spec, nil)
			expect(t, res, sandbox.OutcomeError)
			if !strings.Contains(res.Stderr, "OUTPUT is not JSON-serialisable") || !strings.Contains(res.Stderr, says) || !noOutput(res) {
				t.Errorf("%s: stderr %q (want it to say %q), output %s", code, res.Stderr, says, res.Output)
			}
		}
		res := Exec(t, rt, 0, Spec(`OUTPUT = {1: "a", 2: "b", None: "c", 2.5: "d"}`, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if !sameJSON(res.Output, `{"1": "a", "2": "b", "null": "c", "2.5": "d"}`) {
			t.Fatalf("output %s", res.Output)
		}
	})

	t.Run("an uncaught KeyboardInterrupt ends the run as python3 does: by SIGINT", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import atexit\natexit.register(print, 'atexit')\nprint('before')\nraise KeyboardInterrupt", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeKilled)
		if res.ExitCode != 130 || res.Signal != 2 || !strings.Contains(res.Reason, "SIGINT") ||
			res.Stdout != "before\natexit\n" || !strings.Contains(res.Stderr, "KeyboardInterrupt") {
			t.Fatalf("exit %d signal %d reason %q stdout %q stderr %q", res.ExitCode, res.Signal, res.Reason, res.Stdout, res.Stderr)
		}
		// Caught, or raised in a thread, it is an ordinary exception.
		res = Exec(t, rt, 0, Spec("import threading\ndef f():\n    raise KeyboardInterrupt\nth = threading.Thread(target=f); th.start(); th.join()\ntry:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    print('caught')", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
	})

	t.Run("writes to sys.stdout and sys.stderr keep their order", func(t *testing.T) {
		type event struct {
			stream sandbox.Stream
			data   string
		}
		collect := func(code string) ([]event, sandbox.Result) {
			var mu sync.Mutex
			var events []event
			res := Exec(t, rt, 0, Spec(code, 10*time.Second), func(e sandbox.Event) {
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
		res := Exec(t, rt, 0, Spec("import sys\nfor s in (sys.stdout, sys.stderr):\n    print(s.name, s.mode, s.buffer.mode, s.write_through, s.line_buffering, s.encoding, s.errors, s.fileno(), s is getattr(sys, '__%s__' % s.name[1:-1]))", 10*time.Second), nil)
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
	})

	t.Run("multiprocessing works with fork and spawn", func(t *testing.T) {
		code := "import multiprocessing as mp\n\ndef square(x):\n    return x * x\n\nif __name__ == '__main__':\n" +
			"    for method in ('fork', 'spawn'):\n        with mp.get_context(method).Pool(2) as pool:\n            print(method, pool.map(square, [1, 2, 3]))\n"
		res := Exec(t, rt, 0, Spec(code, 30*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "fork [1, 4, 9]\nspawn [1, 4, 9]\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})

	t.Run("a byte order mark is allowed", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("\ufeffprint(1)", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
	})

	t.Run("traceback shows the user's line numbers", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("x = 1\ny = 2\nraise ValueError('boom')\n", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if res.ExitCode != 1 || !strings.Contains(res.Stderr, `File "main.py", line 3`) ||
			!strings.Contains(res.Stderr, "ValueError: boom") || strings.Contains(res.Stderr, "bootstrap") {
			t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
		}
	})

	t.Run("syntax error names the line", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("x = 1\nif True print(2)\n", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Stderr, "line 2") || !strings.Contains(res.Stderr, "SyntaxError") {
			t.Fatalf("stderr %q", res.Stderr)
		}
	})

	t.Run("sys.exit status", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import sys; print('bye'); sys.exit(3)", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if res.ExitCode != 3 || res.Stdout != "bye\n" {
			t.Fatalf("exit %d stdout %q", res.ExitCode, res.Stdout)
		}
	})

	t.Run("H1 infinite loop times out", func(t *testing.T) {
		start := time.Now()
		res := Exec(t, rt, 0, Spec("while True: pass", 2*time.Second), nil)
		expect(t, res, sandbox.OutcomeTimeout)
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("answered after %s, want within timeout + 1 s", d)
		}
		if !strings.Contains(res.Reason, "2000 ms") {
			t.Fatalf("reason %q does not name the timeout", res.Reason)
		}
		ok(t)
	})

	t.Run("H2 output before a kill is kept", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("print('step 1'); import time; time.sleep(60)", 2*time.Second), nil)
		expect(t, res, sandbox.OutcomeTimeout)
		if res.Stdout != "step 1\n" {
			t.Fatalf("stdout %q, want %q", res.Stdout, "step 1\n")
		}
	})

	t.Run("H3 endless output hits the cap", func(t *testing.T) {
		timeout := 30 * time.Second
		if h.SlowWrites {
			timeout = 2 * time.Minute
		}
		res := Exec(t, rt, 0, Spec("while True: print('y')", timeout), nil)
		expect(t, res, sandbox.OutcomeOutputLimit)
		if !res.StdoutTruncated || int64(len(res.Stdout)) != Limits().StdoutBytes {
			t.Fatalf("truncated %v, %d bytes of stdout, want exactly the cap %d", res.StdoutTruncated, len(res.Stdout), Limits().StdoutBytes)
		}
		ok(t)
	})

	t.Run("H4 small stdout cap is named", func(t *testing.T) {
		spec := Spec("for i in range(3000): print(i)", 10*time.Second)
		spec.Limits.StdoutBytes = 1024
		res := Exec(t, rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeOutputLimit)
		if len(res.Stdout) != 1024 || !res.StdoutTruncated || !strings.HasPrefix(res.Stdout, "0\n1\n2\n") {
			t.Fatalf("stdout %d bytes truncated=%v", len(res.Stdout), res.StdoutTruncated)
		}
		if !strings.Contains(res.Reason, "1024 bytes") {
			t.Fatalf("reason %q does not name the cap", res.Reason)
		}
	})

	t.Run("stdout cap cuts on a character boundary", func(t *testing.T) {
		spec := Spec("print('é' * 1000)", 10*time.Second)
		spec.Limits.StdoutBytes = 101
		res := Exec(t, rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeOutputLimit)
		if res.Stdout != strings.Repeat("é", 50) {
			t.Fatalf("stdout %q, want 50 whole characters", res.Stdout)
		}
	})

	t.Run("H5 allocation over the memory limit", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("b = bytearray(600 * 2**20)", 20*time.Second), nil)
		expect(t, res, sandbox.OutcomeMemoryLimit)
		ok(t)
	})

	t.Run("a run may allocate most of its memory limit", func(t *testing.T) {
		spec := Spec("b = bytearray(96 * 2**20); print(len(b) >> 20)", 30*time.Second)
		spec.Limits.MemoryBytes = 128 << 20
		res := Exec(t, rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeOK)
	})

	t.Run("H6 threads eating memory", func(t *testing.T) {
		// Another slot's run, started while slot 0 saturates the box, still completes.
		other := make(chan sandbox.Result, 1)
		if h.Slots > 1 {
			go func() {
				time.Sleep(500 * time.Millisecond)
				other <- Exec(t, rt, 1, Spec("print('other slot')", 30*time.Second), nil)
			}()
		}
		res := Exec(t, rt, 0, Spec("import threading; [threading.Thread(target=lambda: [0]*10**9).start() for _ in range(4)]", 20*time.Second), nil)
		if res.Outcome != sandbox.OutcomeMemoryLimit && res.Outcome != sandbox.OutcomeTimeout {
			expect(t, res, sandbox.OutcomeMemoryLimit)
		}
		if h.Slots > 1 {
			if o := <-other; o.Outcome != sandbox.OutcomeOK || o.Stdout != "other slot\n" {
				t.Fatalf("the other slot's run while slot 0 saturated the box: %+v", o)
			}
		}
		ok(t)
	})

	// The second bomb first makes itself undumpable, which gives its /proc directories to root:
	// it must be counted and killed all the same.
	for _, c := range []struct{ name, bomb string }{
		{"H7 fork bomb ends and leaves nothing", "import os\nwhile True: os.fork()"},
		{"H7 fork bomb hidden from /proc ownership ends and leaves nothing", "import ctypes, os\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nwhile True: os.fork()"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Exec(t, rt, 0, Spec(c.bomb, 5*time.Second), nil)
			if res.Outcome == sandbox.OutcomeOK || res.Outcome == sandbox.OutcomeSandboxError {
				t.Fatalf("outcome %q (%s)", res.Outcome, res.Reason)
			}
			// The slot's uid has no process left: a new run in the slot sees only itself.
			res = Exec(t, rt, 0, Spec(countOwnProcesses, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeOK)
			if res.Stdout != "1\n" {
				t.Fatalf("processes of the slot's uid after the fork bomb: %q, want 1 (the counter itself)", res.Stdout)
			}
			ok(t)
		})
	}

	t.Run("H11 nothing survives into the next run", func(t *testing.T) {
		a := Exec(t, rt, 0, Spec("x = 1; open('marker', 'w').write('1'); open('/tmp/marker-h11', 'w').write('1')", 10*time.Second), nil)
		expect(t, a, sandbox.OutcomeOK)
		b := Exec(t, rt, 0, Spec("import os; print('x' in globals(), os.path.exists('marker'), os.path.exists('/tmp/marker-h11'))", 10*time.Second), nil)
		expect(t, b, sandbox.OutcomeOK)
		if b.Stdout != "False False False\n" {
			t.Fatalf("run B printed %q", b.Stdout)
		}
	})

	t.Run("module state does not survive into the next run", func(t *testing.T) {
		a := Exec(t, rt, 0, Spec("import json, sys; json.marker = 1; sys.modules['sandpit_marker'] = json; sys.path.append('/marker')", 10*time.Second), nil)
		expect(t, a, sandbox.OutcomeOK)
		b := Exec(t, rt, 0, Spec("import json, sys; print(hasattr(json, 'marker'), 'sandpit_marker' in sys.modules, '/marker' in sys.path)", 10*time.Second), nil)
		expect(t, b, sandbox.OutcomeOK)
		if b.Stdout != "False False False\n" {
			t.Fatalf("run B printed %q", b.Stdout)
		}
	})

	t.Run("random state differs between runs", func(t *testing.T) {
		code := `import random, os, json
out = {"random": random.random(), "urandom": os.urandom(8).hex()}
try:
    import numpy
    out["numpy"] = float(numpy.random.random())
except ImportError:
    pass
print(json.dumps(out))`
		var got [3]map[string]any
		for i := range got {
			res := Exec(t, rt, i%2, Spec(code, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeOK)
			if err := json.Unmarshal([]byte(res.Stdout), &got[i]); err != nil {
				t.Fatalf("stdout %q: %v", res.Stdout, err)
			}
		}
		for key := range got[0] {
			if got[0][key] == got[1][key] || got[0][key] == got[2][key] || got[1][key] == got[2][key] {
				t.Errorf("%s repeats across runs: %v %v %v", key, got[0][key], got[1][key], got[2][key])
			}
		}
	})

	t.Run("the run's process is its own, dumpable and without privileges", func(t *testing.T) {
		// no_new_privs is asked of the kernel (prctl PR_GET_NO_NEW_PRIVS), not read from
		// /proc/self/status: gVisor sets it the same but has no NoNewPrivs line there. (It is
		// printed, not asserted: the pipe runtime's executor runs without it.)
		code := `import ctypes, os
status = dict(l.split(':', 1) for l in open('/proc/self/status'))
links = []
for f in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink("/proc/self/fd/" + f))
    except OSError:
        pass
print(links, file=__import__("sys").stderr)
print(os.stat("/proc/self/fd").st_uid == os.getuid(), len(os.listdir("/proc/self/fd")),
      status['CapEff'].strip(), status['CapPrm'].strip(), ctypes.CDLL(None).prctl(39, 0, 0, 0, 0),
      os.getsid(0) == os.getpid(), os.getgroups(), os.getresuid() == (os.getuid(),) * 3)`
		res := Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		// Descriptors: 0, 1, 2, 3 (the control line) and the one listdir opens.
		if want := "True 5 0000000000000000 0000000000000000"; !strings.HasPrefix(res.Stdout, want) {
			t.Fatalf("stdout %q, want it to start %q (descriptors: %s)", res.Stdout, want, res.Stderr)
		}
		if !strings.HasSuffix(res.Stdout, " True [] True\n") {
			t.Fatalf("stdout %q: the run does not lead its own session with no groups and one uid", res.Stdout)
		}
	})

	t.Run("atexit handlers and non-daemon threads run at exit", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import atexit, threading, time\natexit.register(print, 'atexit')\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nprint('main')", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "main\nthread\natexit\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})

	t.Run("unclosed files are flushed and __del__ runs at exit", func(t *testing.T) {
		code := "import os\nf = os.fdopen(os.dup(1), 'w')\nf.write('unflushed\\n')\nclass D:\n    def __del__(self):\n        print('del')\nd = D()\nprint('main')"
		res := Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if !strings.Contains(res.Stdout, "unflushed\n") || !strings.Contains(res.Stdout, "del\n") || !strings.HasPrefix(res.Stdout, "main\n") {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})

	t.Run("__del__ of globals and of cycles still sees the modules and earlier globals", func(t *testing.T) {
		code := `import sys
PREFIX = "del"
class C:
    def __del__(self):
        sys.stdout.write("%s %s\n" % (PREFIX, self.n))
a = C(); a.n = "global"
b = C(); b.n = "cycle"; b.me = b
keep = {"k": [C()]}; keep["k"][0].n = "nested"
print("main")`
		res := Exec(t, rt, 0, Spec(code, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		for _, want := range []string{"del global\n", "del cycle\n", "del nested\n"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("stdout %q lacks %q (stderr %q)", res.Stdout, want, res.Stderr)
			}
		}
	})

	t.Run("H11 shared memory and message queues do not survive the run", func(t *testing.T) {
		a := Exec(t, rt, 0, Spec(ipcLeaver, 10*time.Second), nil)
		expect(t, a, sandbox.OutcomeOK)
		b := Exec(t, rt, 1, Spec(ipcFinder, 10*time.Second), nil)
		expect(t, b, sandbox.OutcomeOK)
		if b.Stdout != "shm False\nmsg False\nmqueue False\n" {
			t.Fatalf("a later run found the earlier run's IPC objects: %q", b.Stdout)
		}
	})

	t.Run("background process is killed when the run ends", func(t *testing.T) {
		a := Exec(t, rt, 0, Spec("import subprocess; subprocess.Popen(['sleep', '300'], start_new_session=True); print('started')", 10*time.Second), nil)
		expect(t, a, sandbox.OutcomeOK)
		b := Exec(t, rt, 0, Spec(countOwnProcesses, 10*time.Second), nil)
		expect(t, b, sandbox.OutcomeOK)
		if b.Stdout != "1\n" {
			t.Fatalf("processes of the slot's uid: %q, want 1", b.Stdout)
		}
	})

	t.Run("H12 streaming while running", func(t *testing.T) {
		var mu sync.Mutex
		var events []time.Time
		start := time.Now()
		res := Exec(t, rt, 0, Spec("import time\nwhile True: print('.', flush=True); time.sleep(1)", 3*time.Second), func(e sandbox.Event) {
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
	})

	t.Run("H13 numpy allocation over the limit", func(t *testing.T) {
		if h.HasModule != nil && !h.HasModule("numpy") {
			t.Skip("numpy is not installed in this box")
		}
		res := Exec(t, rt, 0, Spec("import numpy as np; a = np.ones(10**11)", 30*time.Second), nil)
		expect(t, res, sandbox.OutcomeMemoryLimit)
	})

	t.Run("H14 segfault is killed with the signal named", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import ctypes; ctypes.string_at(0)", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeKilled)
		if res.Signal != 11 || !strings.Contains(res.Reason, "SIGSEGV") {
			t.Fatalf("signal %d reason %q", res.Signal, res.Reason)
		}
		ok(t)
	})

	t.Run("H18 input() gets EOFError at once", func(t *testing.T) {
		start := time.Now()
		res := Exec(t, rt, 0, Spec("input()", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Stderr, "EOFError") || time.Since(start) > 5*time.Second {
			t.Fatalf("stderr %q after %s", res.Stderr, time.Since(start))
		}
	})

	t.Run("H19 root filesystem is read-only", func(t *testing.T) {
		if !h.ReadOnlyRoot {
			t.Skip("this runtime's root filesystem is not read-only")
		}
		res := Exec(t, rt, 0, Spec("open('/usr/x', 'w')", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if strings.Contains(res.Stderr, "Read-only file system") {
			return
		}
		// gVisor checks a process's permission before the mount's read-only flag, so a run
		// (no capabilities) gets EACCES where Linux says EROFS. The protection is the same
		// when the root is mounted read-only: not even root could write there.
		if !strings.Contains(res.Stderr, "PermissionError") {
			t.Fatalf("stderr %q", res.Stderr)
		}
		mounts := Exec(t, rt, 0, Spec("print([l.split()[3].split(',')[0] for l in open('/proc/self/mounts') if l.split()[1] == '/'])", 10*time.Second), nil)
		if mounts.Stdout != "['ro']\n" {
			t.Fatalf("the write was refused (%q) but the root's mount options are %q, want ['ro']", res.Stderr, mounts.Stdout)
		}
	})

	t.Run("H20 cannot kill init or the executor", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import os\nfor pid in (1, os.getppid()):\n    try:\n        os.kill(pid, 9)\n    except PermissionError as e:\n        print('denied', pid == 1)\n", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "denied True\ndenied False\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
		ok(t)
	})

	t.Run("H24 UTF-8 byte-exact", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("print('测试 😀')", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "测试 😀\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})

	t.Run("invalid UTF-8 is replaced", func(t *testing.T) {
		res := Exec(t, rt, 0, Spec("import sys; sys.stdout.buffer.write(b'a\\xffb\\xe6\\xb5'); sys.stdout.flush()", 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.Stdout != "a\uFFFDb\uFFFD" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})

	t.Run("minimal environment and own uid per slot", func(t *testing.T) {
		code := "import os, json; print(json.dumps({'uid': os.getuid(), 'env': sorted(os.environ), 'cwd': os.getcwd(), 'files': os.listdir('.')}))"
		var got [2]struct {
			UID   int      `json:"uid"`
			Env   []string `json:"env"`
			Cwd   string   `json:"cwd"`
			Files []string `json:"files"`
		}
		for slot := range 2 {
			res := Exec(t, rt, slot, Spec(code, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeOK)
			if err := json.Unmarshal([]byte(res.Stdout), &got[slot]); err != nil {
				t.Fatal(err)
			}
		}
		if got[0].UID == 0 || got[1].UID == 0 {
			t.Fatalf("a run has uid 0: %+v", got)
		}
		// Slots that are sandboxes of their own may use the same uid and path in each.
		if !h.IsolatedSlots && (got[0].UID == got[1].UID || got[0].Cwd == got[1].Cwd) {
			t.Fatalf("slots share uid or directory: %+v", got)
		}
		if len(got[0].Files) != 1 || got[0].Files[0] != "main.py" {
			t.Fatalf("run directory holds %v at start, want only main.py", got[0].Files)
		}
		for _, name := range got[0].Env {
			if strings.HasPrefix(name, "SANDPIT") || name == "DOCKER_HOST" || name == "HOSTNAME" {
				t.Fatalf("environment leaks %s: %v", name, got[0].Env)
			}
		}
	})

	t.Run("concurrent slots run in parallel", func(t *testing.T) {
		n := min(h.Slots, 4)
		var wg sync.WaitGroup
		errs := make(chan string, n)
		start := time.Now()
		for slot := range n {
			wg.Go(func() {
				res := Exec(t, rt, slot, Spec(fmt.Sprintf("import time; time.sleep(1); print(%d)", slot), 10*time.Second), nil)
				if res.Outcome != sandbox.OutcomeOK || res.Stdout != fmt.Sprintf("%d\n", slot) {
					errs <- fmt.Sprintf("slot %d: %s %q %q", slot, res.Outcome, res.Stdout, res.Stderr)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		if d := time.Since(start); d > time.Duration(n)*time.Second {
			t.Errorf("%d one-second runs took %s: they did not overlap", n, d)
		}
	})

	t.Run("cancel kills the run", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		res, err := rt.Run(ctx, 0, Spec("import time; print('a', flush=True); time.sleep(60)", 30*time.Second), nil)
		if time.Since(start) > 5*time.Second {
			t.Fatalf("cancel took %s", time.Since(start))
		}
		if err == nil && res.Outcome != sandbox.OutcomeKilled {
			t.Fatalf("outcome %q after cancel", res.Outcome)
		}
		ok(t)
	})

	isolation(t, h, rt)
	files(t, h, rt)
}
