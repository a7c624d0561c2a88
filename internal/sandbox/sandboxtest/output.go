package sandboxtest

// The cases of OUTPUT: how the program's global OUTPUT comes back, its cap, and what the
// program cannot forge on its control line (H8, H29, H32, H33).

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestH8JSONStdout: H8 json stdout.
func (s *Suite) TestH8JSONStdout(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import json; print(json.dumps({'a': 1}))", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "{\"a\": 1}\n" || res.ExitCode != 0 || !res.StartedAt.After(time.Time{}) {
		t.Fatalf("stdout %q exit %d started %v", res.Stdout, res.ExitCode, res.StartedAt)
	}
}

// TestInputAndOutput: INPUT and OUTPUT.
func (s *Suite) TestInputAndOutput(t *testing.T) {
	spec := Spec("OUTPUT = {'n': len(INPUT), 'sum': sum(INPUT)}", 10*time.Second)
	spec.Input = json.RawMessage(`[1, 2, 3]`)
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOK)
	var out map[string]int
	if err := json.Unmarshal(res.Output, &out); err != nil || out["n"] != 3 || out["sum"] != 6 {
		t.Fatalf("output %s (%v)", res.Output, err)
	}
}

// TestNoOutputGivesNoOutput: no OUTPUT gives no output.
func (s *Suite) TestNoOutputGivesNoOutput(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("x = 1", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if len(res.Output) != 0 && string(res.Output) != "null" {
		t.Fatalf("output %s, want none", res.Output)
	}
}

// TestUnserialisableOutputIsAnErrorThatSaysSo: unserialisable OUTPUT is an error that says so.
func (s *Suite) TestUnserialisableOutputIsAnErrorThatSaysSo(t *testing.T) {
	for code, says := range map[string]string{
		"OUTPUT = {1, 2}":                       "set is not JSON serializable",
		"OUTPUT = float('nan')":                 "Out of range float values",
		"OUTPUT = []\nOUTPUT.append(OUTPUT)":    "Circular reference",
		"OUTPUT = {'a': [1, 2, {'b': {3, 4}}]}": "set is not JSON serializable",
		// numpy's scalars (np.int64 from a pandas sum) say how to convert them.
		"class int64: pass\nOUTPUT = {'n': int64()}": "convert it with int(x), float(x) or x.tolist()",
	} {
		res := Exec(t, s.rt, 0, Spec(code, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Stderr, "OUTPUT is not JSON-serialisable") || !strings.Contains(res.Stderr, says) {
			t.Fatalf("%s: stderr %q does not explain", code, res.Stderr)
		}
	}
}

// TestOutputOverItsCap: OUTPUT over its cap.
func (s *Suite) TestOutputOverItsCap(t *testing.T) {
	spec := Spec("OUTPUT = 'x' * 5000", 10*time.Second)
	spec.Limits.OutputBytes = 1024
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOutputLimit)
	if !strings.Contains(res.Reason, "1024") {
		t.Fatalf("reason %q does not name the cap", res.Reason)
	}
}

// TestHugeOutputStopsAtTheCapWithoutEatingMemory: huge OUTPUT stops at the cap without eating memory.
func (s *Suite) TestHugeOutputStopsAtTheCapWithoutEatingMemory(t *testing.T) {
	for _, code := range []string{`OUTPUT = "x" * (200 * 2**20)`, `OUTPUT = ["x" * 1000] * (300 * 1024)`} {
		res := Exec(t, s.rt, 0, Spec(code, 30*time.Second), nil)
		expect(t, res, sandbox.OutcomeOutputLimit)
		if !strings.Contains(res.Reason, "cap of 1048576 bytes") {
			t.Fatalf("%s: reason %q", code, res.Reason)
		}
	}
}

// TestUserCodeCannotBreakTheBootstrapsReporting: user code cannot break the bootstrap's reporting.
func (s *Suite) TestUserCodeCannotBreakTheBootstrapsReporting(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import json, os, sys\njson.dumps = lambda *a, **k: 1/0\nos.write = None\nsys.exit = None\nOUTPUT = {'ok': True}", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if string(res.Output) != `{"ok": true}` && string(res.Output) != `{"ok":true}` {
		t.Fatalf("output %s", res.Output)
	}
	res = Exec(t, s.rt, 0, Spec("import os\nos.close(3)\nOUTPUT = 1", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if !strings.Contains(res.Stderr, "descriptor 3") {
		t.Fatalf("stderr %q does not explain", res.Stderr)
	}
}

// TestDeepJSONNeitherLeavesTheSandboxNorBreaksTheSession: JSON nested past the limit neither leaves the sandbox nor breaks the session.
func (s *Suite) TestDeepJSONNeitherLeavesTheSandboxNorBreaksTheSession(t *testing.T) {
	// Python's JSON reader fails near 1000 levels, the session's at 10 000: OUTPUT and
	// agent.* arguments are held to the 500 levels an input may have.
	res := Exec(t, s.rt, 0, Spec("v = 1\nfor _ in range(600): v = [v]\nOUTPUT = v", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if !strings.Contains(res.Reason+res.Stderr, "nests 600 levels deep; the limit is 500") || !noOutput(res) {
		t.Fatalf("deep OUTPUT: reason %q stderr %q output %.80s", res.Reason, res.Stderr, res.Output)
	}
	code := "import os\ndeep = b'[' * 1000 + b']' * 1000\n" +
		"os.write(3, b'{\"type\":\"call\",\"method\":\"log\",\"args\":' + deep + b'}\\n')\n" +
		"print(os.read(3, 1000).decode().strip())"
	res = Exec(t, s.rt, 0, Spec(code, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if !strings.Contains(res.Stdout, "nest 1000 levels deep; the limit is 500") {
		t.Fatalf("deep call arguments: stdout %q", res.Stdout)
	}
	s.nextRunOK(t)
}

// TestH29FramesOnDescriptor3DoNotDecideTheOutcome: H29 the program's frames on descriptor 3 do not decide its outcome.
func (s *Suite) TestH29FramesOnDescriptor3DoNotDecideTheOutcome(t *testing.T) {
	for _, code := range []string{
		`import os; os.write(3, b'{"type":"memory_error"}\n')`,
		`import os; os.write(3, b'{"type":"output_too_large","bytes":123456789012}\n')`,
		`import os; os.write(3, b'{"type":"output","bytes":123456789012}\n')`,
		"import os\ntry:\n    os.write(3, b'{\"type\":\"call\",\"method\":\"log\",\"args\":' + b'x' * (4 << 20) + b'}\\n')\nexcept OSError:\n    pass",
		`import os, threading; threading.Thread(target=os.write, args=(3, b'{"type":"memory_error"}\n')).start()`,
	} {
		res := Exec(t, s.rt, 0, Spec(code, 10*time.Second), nil)
		expect(t, res, sandbox.OutcomeOK)
		if res.ExitCode != 0 || res.Reason != "" || !noOutput(res) {
			t.Fatalf("%s: exit %d reason %q output %s", code, res.ExitCode, res.Reason, res.Output)
		}
	}
	// A real MemoryError, which only the interpreter sees, still counts, in any thread: the
	// run's status is then 1.
	res := Exec(t, s.rt, 0, Spec("import threading\ndef f():\n    b = bytearray(2**40)\nth = threading.Thread(target=f)\nth.start()\nth.join()\nprint('main done')", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeMemoryLimit)
	if res.ExitCode != 1 || res.Stdout != "main done\n" || !strings.Contains(res.Stderr, "MemoryError") {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// OUTPUT sent by hand is held to the same rules as the bootstrap's.
	res = Exec(t, s.rt, 0, Spec(`import os; d = b'{"a": 1, "a": 2}'; os.write(3, b'{"type":"output","bytes":%d}\n' % len(d) + d)`, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if !strings.Contains(res.Reason, `the name "a" twice`) || !noOutput(res) {
		t.Fatalf("reason %q output %s", res.Reason, res.Output)
	}
	// Bytes the program sends itself count against the OUTPUT cap as OUTPUT would.
	spec := Spec(`import os; os.write(3, b'{"type":"output","bytes":5000}\n' + b'"' + b'x' * 4998 + b'"')`, 10*time.Second)
	spec.Limits.OutputBytes = 1024
	expect(t, Exec(t, s.rt, 0, spec, nil), sandbox.OutcomeOutputLimit)
}

// TestH32OutputIsReadWhenAPlainInterpreterWouldFinish: H32 OUTPUT is read when a plain interpreter would finish.
func (s *Suite) TestH32OutputIsReadWhenAPlainInterpreterWouldFinish(t *testing.T) {
	for name, c := range map[string]struct{ code, want string }{
		// The threads append in turn (each waits for the one before it), after the main code
		// has ended: 10 ms apart alone, a loaded machine appended them out of order.
		"threads in turn": {"import threading, time\nresults = []\nturns = [threading.Event() for _ in range(4)]\nturns[0].set()\n" +
			"def work(i):\n    time.sleep(0.1)\n    turns[i].wait()\n    results.append(i)\n    turns[i + 1].set()\n" +
			"threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]\nfor th in threads:\n    th.start()\nOUTPUT = results", `[0, 1, 2]`},
		"a late thread": {"import threading, time\nOUTPUT = {}\nthreading.Thread(target=lambda: (time.sleep(0.1), OUTPUT.update(late=True))).start()", `{"late": true}`},
		// Registered as decorators: atexit.register(f) as the last line would be a value to
		// display, whose formatting makes IPython's shell, seconds in a fork of a preload
		// without it under gVisor (a CI run passed the 10 s timeout that way).
		"atexit updates": {"import atexit\nOUTPUT = {'n': 1}\n@atexit.register\ndef more():\n    OUTPUT.update(n=2)", `{"n": 2}`},
		"atexit assigns": {"import atexit\n@atexit.register\ndef last():\n    global OUTPUT\n    OUTPUT = 'set at exit'", `"set at exit"`},
		// A forked child that ends the program too does not send its own OUTPUT.
		"a forked child": {"import os\npid = os.fork()\nOUTPUT = 'child' if pid == 0 else 'parent'\nif pid:\n    os.waitpid(pid, 0)", `"parent"`},
	} {
		t.Run(name, func(t *testing.T) {
			res := Exec(t, s.rt, 0, Spec(c.code, 10*time.Second), nil)
			expect(t, res, sandbox.OutcomeOK)
			if !sameJSON(res.Output, c.want) {
				t.Errorf("%s:\noutput %s, want %s", c.code, res.Output, c.want)
			}
		})
	}
}

// TestH33KeysThatBecomeTheSameJSONNameAreAnError: H33 keys that become the same JSON name are an error naming the key.
func (s *Suite) TestH33KeysThatBecomeTheSameJSONNameAreAnError(t *testing.T) {
	for code, says := range map[string]string{
		`OUTPUT = {1: "first", "1": "second"}`:           `become the JSON name "1"`,
		`OUTPUT = {"a": [{"x": 0, True: 1, "true": 2}]}`: `become the JSON name "true"`,
		`OUTPUT = {"k": {None: 1, "null": 2}}`:           `become the JSON name "null"`,
		`OUTPUT = [{2.5: "a", "2.5": "b"}]`:              `become the JSON name "2.5"`,
		"OUTPUT = {'x' * 3000: [{1: 'a', '1': 'b'}]} ":   `become the JSON name "1"`,
	} {
		spec := Spec(code, 10*time.Second)
		res := Exec(t, s.rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeError)
		if !strings.Contains(res.Stderr, "OUTPUT is not JSON-serialisable") || !strings.Contains(res.Stderr, says) || !noOutput(res) {
			t.Errorf("%s: stderr %q (want it to say %q), output %s", code, res.Stderr, says, res.Output)
		}
	}
	res := Exec(t, s.rt, 0, Spec(`OUTPUT = {1: "a", 2: "b", None: "c", 2.5: "d"}`, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if !sameJSON(res.Output, `{"1": "a", "2": "b", "null": "c", "2.5": "d"}`) {
		t.Fatalf("output %s", res.Output)
	}
}
