package sandboxtest

// The cases of a program behaving as it would under python3: its exit, its tracebacks, its
// teardown, its standard input (H18).

import (
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestMultiprocessingWorksWithForkAndSpawn: multiprocessing works with fork and spawn.
func (s *Suite) TestMultiprocessingWorksWithForkAndSpawn(t *testing.T) {
	code := "import multiprocessing as mp\n\ndef square(x):\n    return x * x\n\nif __name__ == '__main__':\n" +
		"    for method in ('fork', 'spawn'):\n        with mp.get_context(method).Pool(2) as pool:\n            print(method, pool.map(square, [1, 2, 3]))\n"
	res := Exec(t, s.rt, 0, Spec(code, 30*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "fork [1, 4, 9]\nspawn [1, 4, 9]\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// TestByteOrderMarkIsAllowed: a byte order mark is allowed.
func (s *Suite) TestByteOrderMarkIsAllowed(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("\ufeffprint(1)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
}

// TestTracebackShowsTheUsersLineNumbers: traceback shows the user's line numbers.
func (s *Suite) TestTracebackShowsTheUsersLineNumbers(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("x = 1\ny = 2\nraise ValueError('boom')\n", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if res.ExitCode != 1 || !strings.Contains(res.Stderr, `File "main.py", line 3`) ||
		!strings.Contains(res.Stderr, "ValueError: boom") || strings.Contains(res.Stderr, "bootstrap") {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
}

// TestSyntaxErrorNamesTheLine: syntax error names the line.
func (s *Suite) TestSyntaxErrorNamesTheLine(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("x = 1\nif True print(2)\n", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if !strings.Contains(res.Stderr, "line 2") || !strings.Contains(res.Stderr, "SyntaxError") {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

// TestSysExitStatus: sys.exit status.
func (s *Suite) TestSysExitStatus(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import sys; print('bye'); sys.exit(3)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if res.ExitCode != 3 || res.Stdout != "bye\n" {
		t.Fatalf("exit %d stdout %q", res.ExitCode, res.Stdout)
	}
}

// TestAtexitHandlersAndNonDaemonThreadsRunAtExit: atexit handlers and non-daemon threads run at exit.
func (s *Suite) TestAtexitHandlersAndNonDaemonThreadsRunAtExit(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import atexit, threading, time\natexit.register(print, 'atexit')\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nprint('main')", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "main\nthread\natexit\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// TestUnclosedFilesAreFlushedAndDelRunsAtExit: unclosed files are flushed and __del__ runs at exit.
func (s *Suite) TestUnclosedFilesAreFlushedAndDelRunsAtExit(t *testing.T) {
	code := "import os\nf = os.fdopen(os.dup(1), 'w')\nf.write('unflushed\\n')\nclass D:\n    def __del__(self):\n        print('del')\nd = D()\nprint('main')"
	res := Exec(t, s.rt, 0, Spec(code, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if !strings.Contains(res.Stdout, "unflushed\n") || !strings.Contains(res.Stdout, "del\n") || !strings.HasPrefix(res.Stdout, "main\n") {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// TestDelOfGlobalsAndCyclesSeesModulesAndEarlierGlobals: __del__ of globals and of cycles still sees the modules and earlier globals.
func (s *Suite) TestDelOfGlobalsAndCyclesSeesModulesAndEarlierGlobals(t *testing.T) {
	code := `import sys
PREFIX = "del"
class C:
    def __del__(self):
        sys.stdout.write("%s %s\n" % (PREFIX, self.n))
a = C(); a.n = "global"
b = C(); b.n = "cycle"; b.me = b
keep = {"k": [C()]}; keep["k"][0].n = "nested"
print("main")`
	res := Exec(t, s.rt, 0, Spec(code, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	for _, want := range []string{"del global\n", "del cycle\n", "del nested\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout %q lacks %q (stderr %q)", res.Stdout, want, res.Stderr)
		}
	}
}

// TestH18InputGetsEOFErrorAtOnce: H18 input() gets EOFError at once.
func (s *Suite) TestH18InputGetsEOFErrorAtOnce(t *testing.T) {
	start := time.Now()
	res := Exec(t, s.rt, 0, Spec("input()", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if !strings.Contains(res.Stderr, "EOFError") || time.Since(start) > 5*time.Second {
		t.Fatalf("stderr %q after %s", res.Stderr, time.Since(start))
	}
}
