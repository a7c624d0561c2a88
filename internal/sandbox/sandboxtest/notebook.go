package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The notebook layer (docs/notebook.md): the last expression's value and what the program
// displays come back as Result.Results, formatted by IPython's DisplayFormatter; stdout stays
// what the program wrote.

// needIPython skips t when the box's python has no IPython.
func (s *Suite) needIPython(t *testing.T, more ...string) {
	t.Helper()
	for _, m := range append([]string{"IPython"}, more...) {
		if s.HasModule == nil || !s.HasModule(m) {
			t.Skipf("the box's python has no %s", m)
		}
	}
}

// mainResult returns res's main result, or nil; it fails t when there is more than one, or
// one that is not the last.
func mainResult(t *testing.T, res sandbox.Result) *sandbox.Display {
	t.Helper()
	var main *sandbox.Display
	for i := range res.Results {
		if res.Results[i].IsMainResult {
			if main != nil || i != len(res.Results)-1 {
				t.Fatalf("results %+v: more than one main result, or not the last", res.Results)
			}
			main = &res.Results[i]
		}
	}
	return main
}

// str returns the JSON string of d's mime type, "" when absent or not a string.
func str(d sandbox.Display, mime string) string {
	var s string
	_ = json.Unmarshal(d.Data[mime], &s)
	return s
}

// TestNotebookLastExpressionValue: a run's last expression's value comes back as its main
// result, formatted as IPython would, and never in stdout; no value for None, an assignment,
// a trailing ";" or a last statement that is not an expression.
func (s *Suite) TestNotebookLastExpressionValue(t *testing.T) {
	s.needIPython(t)
	cases := []struct {
		name, code, stdout, value string // value "": no main result
	}{
		{"int", "x = 41\nx + 1", "", "42"},
		{"print then value", "print('a')\n7", "a\n", "7"},
		{"None", "None", "", ""},
		{"print returns None", "print('b')", "b\n", ""},
		{"assignment", "x = 1", "", ""},
		{"semicolon", "x = 5\nx;", "", ""},
		{"semicolon and comment", "x = 5\nx; # quiet", "", ""},
		{"after an if block", "if True:\n    y = 2\ny * 3", "", "6"},
		{"inside an if block", "if True:\n    7", "", ""},
		{"bare string", "'hello'", "", "'hello'"},
		{"list", "[1, 'a', None]", "", "[1, 'a', None]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Exec(t, s.rt, 0, Spec(c.code, HeavyImportTimeout), nil)
			expect(t, res, sandbox.OutcomeOK)
			if res.Stdout != c.stdout || res.Stderr != "" {
				t.Fatalf("stdout %q stderr %q, want stdout %q", res.Stdout, res.Stderr, c.stdout)
			}
			main := mainResult(t, res)
			switch {
			case c.value == "" && main != nil:
				t.Fatalf("a main result %+v, want none", *main)
			case c.value != "" && main == nil:
				t.Fatalf("no main result (results %+v), want %q", res.Results, c.value)
			case c.value != "" && main.Text() != c.value:
				t.Fatalf("main result %q, want %q", main.Text(), c.value)
			}
		})
	}
}

// TestNotebookDataFrameValue: a DataFrame as the last expression comes back with its HTML
// table, its text and its columns as e2b/data, as E2B's code interpreter publishes them (dates
// as ISO 8601 text, NaN and NaT as null); a frame too large for e2b/data is shown without it.
func (s *Suite) TestNotebookDataFrameValue(t *testing.T) {
	s.needIPython(t, "pandas")
	code := "import pandas as pd\ndisplay(pd.DataFrame({'n': range(200_000)}))\n" +
		"df = pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3.5, float('nan')], 'at': pd.to_datetime(['2024-01-02', None])})\ndf"
	res := Exec(t, s.rt, 0, Spec(code, HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
	main := mainResult(t, res)
	if main == nil || !strings.Contains(str(*main, "text/html"), "<table") || !strings.Contains(str(*main, "text/html"), "Lima") ||
		!strings.Contains(main.Text(), "Oslo") || res.Stdout != "" {
		t.Fatalf("results %+v stdout %q: want the DataFrame's table as text/html and text/plain", res.Results, res.Stdout)
	}
	if want := `{"city": ["Oslo", "Lima"], "temp": [3.5, null], "at": ["2024-01-02T00:00:00", null]}`; !sameJSON(main.Data["e2b/data"], want) {
		t.Fatalf("e2b/data %s, want %s", main.Data["e2b/data"], want)
	}
	if big := res.Results[0]; len(res.Results) != 2 || big.Data["e2b/data"] != nil || str(big, "text/html") == "" {
		t.Fatalf("the large frame's display %+v: want its table without e2b/data", big)
	}
}

// TestNotebookDisplays: display() of IPython's HTML, Markdown, Image and JSON objects comes
// back in order, each a bundle with its MIME type, before the value; events stream them in
// order with stdout.
func (s *Suite) TestNotebookDisplays(t *testing.T) {
	s.needIPython(t)
	code := `from IPython.display import display, HTML, Markdown, Image, JSON
import base64
png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
print("before")
display(HTML("<b>bold</b>"))
display(Markdown("# Title"))
display(Image(data=png, format="png"))
display(JSON({"k": [1, 2]}))
print("after")
3`
	var events []sandbox.Event
	res := Exec(t, s.rt, 0, Spec(code, HeavyImportTimeout), func(e sandbox.Event) { events = append(events, e) })
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "before\nafter\n" || len(res.Results) != 5 {
		t.Fatalf("stdout %q, %d results %+v: want 4 displays and the value", res.Stdout, len(res.Results), res.Results)
	}
	want := []struct{ mime, has string }{{"text/html", "<b>bold</b>"}, {"text/markdown", "# Title"}, {"image/png", "iVBORw0KGgo"}}
	for i, w := range want {
		d := res.Results[i]
		if d.IsMainResult || !strings.Contains(str(d, w.mime), w.has) || d.Text() == "" {
			t.Fatalf("result %d %+v: want %s holding %q and a text/plain", i, d, w.mime, w.has)
		}
	}
	var j map[string][]int
	if json.Unmarshal(res.Results[3].Data["application/json"], &j) != nil || len(j["k"]) != 2 {
		t.Fatalf("result 3 %+v: want application/json {\"k\": [1, 2]}", res.Results[3])
	}
	if m := mainResult(t, res); m == nil || m.Text() != "3" {
		t.Fatalf("main result %+v, want 3", m)
	}
	// The stream: "before", the four displays, "after", the value.
	var order []string
	for _, e := range events {
		switch e.Stream {
		case sandbox.StreamStdout:
			order = append(order, e.Data)
		case sandbox.StreamDisplay:
			order = append(order, "display")
		}
	}
	if got := strings.Join(order, "|"); got != "before\n|display|display|display|display|after\n|display" {
		t.Fatalf("events in the order %q", got)
	}
}

// TestNotebookFailedMagicIsOneMessage: a %pip install the host refuses stops the program with
// one RuntimeError saying why, its traceback ending at the user's line (no frame of IPython's
// magics or of the bootstrap); so does a failed agent.* call.
func (s *Suite) TestNotebookFailedMagicIsOneMessage(t *testing.T) {
	s.needIPython(t)
	const why = "the package index https://pypi.org/simple could not be reached from the sandbox"
	for _, c := range []struct{ code, line, last string }{
		{"print('before')\n%pip install tinypkg\nprint('after')", "get_ipython().run_line_magic('pip', 'install tinypkg')",
			"RuntimeError: sandpit: %pip install failed: " + why},
		{"print('before')\nagent.log('hello')\nprint('after')", "agent.log('hello')", "agent.Error: log: " + why},
	} {
		spec := Spec(c.code, HeavyImportTimeout)
		spec.Calls = func(_ context.Context, call sandbox.Call) (json.RawMessage, error) {
			if call.Method == "pip_install" {
				return nil, errors.New("%pip install failed: " + why)
			}
			return nil, errors.New(call.Method + ": " + why)
		}
		res := Exec(t, s.rt, 0, spec, nil)
		expect(t, res, sandbox.OutcomeError)
		want := "Traceback (most recent call last):\n  File \"main.py\", line 2, in <module>\n    " + c.line + "\n" + c.last + "\n"
		if res.Stdout != "before\n" || res.Stderr != want || res.Error == nil || res.Error.Traceback != want {
			t.Fatalf("%q: stdout %q, stderr %q, error %+v; want stderr %q", c.code, res.Stdout, res.Stderr, res.Error, want)
		}
	}
}

// TestNotebookFigure: a matplotlib figure left open comes back as an image/png display as
// well as figure-1.png.
func (s *Suite) TestNotebookFigure(t *testing.T) {
	s.needIPython(t, "matplotlib")
	spec := Spec("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 1, 3])\nplt.title('t');", HeavyImportTimeout)
	spec.Charts = true
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOK)
	if len(res.Results) != 1 || !strings.HasPrefix(str(res.Results[0], "image/png"), "iVBORw0KGgo") ||
		!strings.Contains(res.Results[0].Text(), "Figure") || res.Results[0].IsMainResult {
		t.Fatalf("results %+v: want one image/png display of the figure", res.Results)
	}
	if len(res.Files) != 1 || res.Files[0].Name != "figure-1.png" {
		t.Fatalf("files %+v: want figure-1.png as well", res.Files)
	}
	// Its chart as data, in E2B's shape.
	var chart struct {
		Type     string `json:"type"`
		Title    string `json:"title"`
		Elements []struct {
			Points [][2]float64 `json:"points"`
		} `json:"elements"`
	}
	raw := res.Results[0].Data["e2b/chart"]
	if err := json.Unmarshal(raw, &chart); err != nil || chart.Type != "line" || chart.Title != "t" || len(chart.Elements) != 1 ||
		!reflect.DeepEqual(chart.Elements[0].Points, [][2]float64{{1, 2}, {2, 1}, {3, 3}}) {
		t.Fatalf("e2b/chart %s (%v): want a line chart titled t of (1, 2), (2, 1), (3, 3)", raw, err)
	}
}

// TestNotebookRaisingReprIsANote: a _repr_html_ that raises gives the object's text/plain and
// a note, never a failed run or a traceback on stderr.
func (s *Suite) TestNotebookRaisingReprIsANote(t *testing.T) {
	s.needIPython(t)
	code := "class Bad:\n    def _repr_html_(self):\n        raise ValueError('no html')\n    def __repr__(self):\n        return 'Bad()'\nBad()"
	res := Exec(t, s.rt, 0, Spec(code, HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
	m := mainResult(t, res)
	if m == nil || m.Text() != "Bad()" || m.Data["text/html"] != nil || !strings.Contains(m.Note, "_repr_html_ raised ValueError: no html") ||
		res.Stderr != "" || res.Error != nil {
		t.Fatalf("main result %+v stderr %q error %+v", m, res.Stderr, res.Error)
	}
}

// TestNotebookOversizedDisplayIsCut: a display larger than what is left of the cap on
// displays loses its largest representations until it fits, down to its text/plain cut short,
// with a note; the run ends ok within its caps.
func (s *Suite) TestNotebookOversizedDisplayIsCut(t *testing.T) {
	s.needIPython(t)
	code := "class Wide:\n    def _repr_html_(self):\n        return 'x' * (2 << 20)\n    def _repr_markdown_(self):\n        return '*w*'\n" +
		"    def __repr__(self):\n        return 'Wide()'\ndisplay(Wide())\n" +
		"class Big:\n    def _repr_html_(self):\n        return 'x' * (50 << 20)\n    def __repr__(self):\n        return 'y' * (50 << 20)\nBig()"
	res := Exec(t, s.rt, 0, Spec(code, 60*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if w := res.Results[0]; len(res.Results) != 2 || w.Text() != "Wide()" || str(w, "text/markdown") != "*w*" || w.Data["text/html"] != nil ||
		!strings.HasSuffix(w.Note, "text/html left out") {
		t.Fatalf("display: %d MIME types, text %q, note %q: want text/html alone left out", len(w.Data), w.Text(), w.Note)
	}
	m := mainResult(t, res)
	if m == nil || len(m.Data) != 1 || m.Text() == "" || len(m.Text()) > 8192 || !strings.HasPrefix(m.Text(), "yyyy") ||
		!strings.Contains(m.Note, "only its text/plain is kept") {
		t.Fatalf("main result: %d MIME types, text %.40q (%d bytes), note %q", len(m.Data), m.Text(), len(m.Text()), m.Note)
	}
}

// TestNotebookErrorIsReported: an uncaught exception comes back as the result's error (its
// name, message and traceback), and stderr is what python3 prints; with TracebackInErrorOnly
// the traceback is in the error alone.
func (s *Suite) TestNotebookErrorIsReported(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("x = 1\n1 / 0", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeError)
	e := res.Error
	if e == nil || e.Name != "ZeroDivisionError" || e.Value != "division by zero" ||
		!strings.Contains(e.Traceback, `File "main.py", line 2`) || e.Traceback != res.Stderr || len(res.Results) != 0 {
		t.Fatalf("error %+v stderr %q results %+v", e, res.Stderr, res.Results)
	}
	// Asked as a Jupyter kernel reports one (E2B's /execute): the error alone, stderr holding
	// only what the program wrote there (the traceback on both showed it twice in E2B's SDK).
	spec := Spec("import sys\nprint('note', file=sys.stderr)\nx = 1\n1 / 0", HeavyImportTimeout)
	spec.TracebackInErrorOnly = true
	res = Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeError)
	if e := res.Error; e == nil || e.Name != "ZeroDivisionError" || !strings.Contains(e.Traceback, `File "main.py", line 4`) || res.Stderr != "note\n" {
		t.Fatalf("traceback in the error only: error %+v stderr %q", e, res.Stderr)
	}
	res = Exec(t, s.rt, 0, Spec("import sys\nsys.exit(3)", HeavyImportTimeout), nil)
	if res.Error != nil || res.ExitCode != 3 {
		t.Fatalf("sys.exit(3): error %+v exit %d; an exit is not an error", res.Error, res.ExitCode)
	}
}

// TestNotebookShellSyntax: IPython's ! and % lines run: a shell command as the run's user,
// %time; a plain program's syntax error stays Python's.
func (s *Suite) TestNotebookShellSyntax(t *testing.T) {
	s.needIPython(t)
	res := Exec(t, s.rt, 0, Spec("!echo hi\n!id -u\nx = 2\n%time y = x * 21\ny", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
	if !strings.HasPrefix(res.Stdout, "hi\n") || strings.HasPrefix(res.Stdout, "hi\n0\n") || !strings.Contains(res.Stdout, "Wall time") {
		t.Fatalf("stdout %q stderr %q: want the shell's line (not as root) and %%time's", res.Stdout, res.Stderr)
	}
	if m := mainResult(t, res); m == nil || m.Text() != "42" {
		t.Fatalf("main result %+v, want 42", m)
	}
	for code, want := range map[string]string{
		"%env HOME":                          "'/",
		"v = 1\n%who_ls":                     "['v']",
		"files = !echo a; echo b\nfiles":     "['a', 'b']",
		"%timeit -n 1 -r 1 -q sum(range(9))": "",
	} {
		res = Exec(t, s.rt, 0, Spec(code, HeavyImportTimeout), nil)
		expect(t, res, sandbox.OutcomeOK)
		m := mainResult(t, res)
		if (want == "") != (m == nil) || m != nil && !strings.HasPrefix(m.Text(), want) {
			t.Fatalf("%s: main result %+v stderr %q, want %q", code, m, res.Stderr, want)
		}
	}
	// Python's own syntax error, as python3 prints it (no frame of the bootstrap's parser).
	res = Exec(t, s.rt, 0, Spec("x = (", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeError)
	if !strings.HasPrefix(res.Stderr, "  File \"main.py\", line 1\n    x = (\n") || !strings.HasSuffix(res.Stderr, "SyntaxError: '(' was never closed\n") ||
		res.Error == nil || res.Error.Name != "SyntaxError" {
		t.Fatalf("syntax error: stderr %q error %+v", res.Stderr, res.Error)
	}
}

// TestNotebookCellCleanups: code that is not valid Python goes through IPython's own cell
// transform, as a notebook cell does: a common indentation (as E2B's tests and code pasted
// from a prompt have it) and >>> prompts are removed, and a traceback keeps the user's line
// numbers; valid Python is never transformed.
func (s *Suite) TestNotebookCellCleanups(t *testing.T) {
	s.needIPython(t)
	for code, want := range map[string]string{
		"\n    x = 1\n    x":     "1",
		">>> y = 2\n>>> y * 3":   "6",
		"s = '''\n... x\n'''\ns": `'\n... x\n'`,
	} {
		res := Exec(t, s.rt, 0, Spec(code, HeavyImportTimeout), nil)
		expect(t, res, sandbox.OutcomeOK)
		if m := mainResult(t, res); m == nil || m.Text() != want {
			t.Fatalf("%q: main result %+v, stderr %q; want %s", code, m, res.Stderr, want)
		}
	}
	res := Exec(t, s.rt, 0, Spec("\n\n    a = 1\n    1 / 0", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeError)
	if e := res.Error; e == nil || e.Name != "ZeroDivisionError" || !strings.Contains(e.Traceback, "File \"main.py\", line 4, in <module>\n    1 / 0\n") {
		t.Fatalf("error %+v: want a ZeroDivisionError at main.py, line 4", e)
	}
}

// TestNotebookPrintIsOneEvent: print('Hello') arrives as one stdout event "Hello\n", every
// time: as a run's only output, in 10 runs of their own, and 100 times over in one run, each
// print spaced from the next so that it is read by itself, no event ending inside a line (one
// run of 100 prints puts a print's two writes, its text and its end, to the test as often as
// 100 runs did, for a hundredth of the runs' starts); a partial line still arrives by itself
// before the program goes on.
func (s *Suite) TestNotebookPrintIsOneEvent(t *testing.T) {
	for i := range 10 {
		var events []sandbox.Event
		res := Exec(t, s.rt, 0, Spec("print('Hello')", HeavyImportTimeout), func(e sandbox.Event) { events = append(events, e) })
		expect(t, res, sandbox.OutcomeOK)
		if len(events) != 1 || events[0].Stream != sandbox.StreamStdout || events[0].Data != "Hello\n" {
			t.Fatalf("run %d: events %+v, want one stdout event \"Hello\\n\"", i, events)
		}
	}
	var events []sandbox.Event
	res := Exec(t, s.rt, 0, Spec("import time\nfor _ in range(100):\n    print('Hello')\n    time.sleep(0.005)", HeavyImportTimeout),
		func(e sandbox.Event) { events = append(events, e) })
	expect(t, res, sandbox.OutcomeOK)
	var all strings.Builder
	for _, e := range events {
		if e.Stream != sandbox.StreamStdout || !strings.HasSuffix(e.Data, "\n") {
			t.Fatalf("100 prints: event %+v ends inside a line; want each line whole (events %d)", e, len(events))
		}
		all.WriteString(e.Data)
	}
	if all.String() != strings.Repeat("Hello\n", 100) {
		t.Fatalf("100 prints: stdout %q, want \"Hello\\n\" 100 times", all.String())
	}
	type stamped struct {
		data string
		at   time.Time
	}
	var got []stamped
	start := time.Now()
	res = Exec(t, s.rt, 0, Spec("import time\nprint('x', end='', flush=True)\ntime.sleep(3)\nprint('y')", HeavyImportTimeout),
		func(e sandbox.Event) { got = append(got, stamped{e.Data, time.Now()}) })
	expect(t, res, sandbox.OutcomeOK)
	if len(got) != 2 || got[0].data != "x" || got[1].data != "y\n" || got[0].at.Sub(start) > got[1].at.Sub(start)-time.Second {
		t.Fatalf("events %+v: want \"x\" well before \"y\\n\"", got)
	}
}

// TestNotebookSessionExecutionCount: a session's calls number their values and name their
// code <call-N> in tracebacks, counting the user's calls only: the daemon's own (Spec.Internal,
// such as the first call that starts a fork's or a resumed session's interpreter) take no
// number. Globals persist.
func (s *Suite) TestNotebookSessionExecutionCount(t *testing.T) {
	s.needIPython(t)
	slot := s.Slots - 1
	call := func(code string, internal bool) sandbox.Result {
		t.Helper()
		spec := Spec(code, HeavyImportTimeout)
		spec.Session, spec.Internal = true, internal
		return Exec(t, s.Runtime, slot, spec, nil) // a session's call starts "session"
	}
	if res := call("pass", true); res.Outcome != sandbox.OutcomeOK || res.ExecutionCount != 0 {
		t.Fatalf("the daemon's first call: outcome %s, execution_count %d, want ok and none", res.Outcome, res.ExecutionCount)
	}
	for _, c := range []struct {
		code, value string
		internal    bool
		count       int
	}{{"a = 20\na", "20", false, 1}, {"b = a + 1", "", false, 2}, {"c = 0", "", true, 0}, {"a + b", "41", false, 3}} {
		res := call(c.code, c.internal)
		expect(t, res, sandbox.OutcomeOK)
		if res.ExecutionCount != c.count {
			t.Fatalf("call %q: execution_count %d, want %d", c.code, res.ExecutionCount, c.count)
		}
		if len(res.Files) != 0 { // IPython's profile README was one in a session's home
			t.Fatalf("call %q made no file, but lists %+v", c.code, res.Files)
		}
		m := mainResult(t, res)
		if (c.value == "") != (m == nil) || (m != nil && (m.Text() != c.value || m.ExecutionCount != c.count)) {
			t.Fatalf("call %q: main result %+v, want %q", c.code, m, c.value)
		}
	}
	res := call("x = 1\n1 / 0", false)
	expect(t, res, sandbox.OutcomeError)
	if res.ExecutionCount != 4 || res.Error == nil || !strings.Contains(res.Error.Traceback, `File "<call-4>", line 2`) {
		t.Fatalf("the fourth call: execution_count %d, error %+v; want 4 and a traceback through <call-4>, line 2", res.ExecutionCount, res.Error)
	}
	// The slot serves one-shot runs again.
	res = Exec(t, s.rt, slot, Spec("print(1)", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
}

// TestNotebookStateOutsideHome: the interpreter's own state (IPython's profile, matplotlib's
// configuration) is kept outside the program's home and working directory, in a run and in a
// session's call: none of it shows among the user's files or a call's output files.
func (s *Suite) TestNotebookStateOutsideHome(t *testing.T) {
	s.needIPython(t, "matplotlib")
	code := `import json, os, IPython, matplotlib
from IPython.paths import get_ipython_dir
display(1)
home, cwd = os.path.realpath(os.path.expanduser('~')), os.path.realpath(os.getcwd())
dirs = [IPython.get_ipython().profile_dir.location, get_ipython_dir(), matplotlib.get_configdir()]
print(json.dumps({'inside': [d for d in dirs for p in (home, cwd) if (os.path.realpath(d) + '/').startswith(p + '/')],
                  'home': sorted(os.listdir(home)), 'cwd': sorted(set(os.listdir(cwd)) - {'main.py'})}))`
	for _, session := range []bool{false, true} {
		spec, rt, slot := Spec(code, HeavyImportTimeout), s.rt, 0
		if session { // not TestNotebookSessionExecutionCount's slot: a slot keeps one session interpreter
			spec.Session, rt, slot = true, s.Runtime, max(s.Slots-2, 0)
		}
		res := Exec(t, rt, slot, spec, nil)
		expect(t, res, sandbox.OutcomeOK)
		var got struct{ Inside, Home, Cwd []string }
		if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil || len(got.Inside)+len(got.Home)+len(got.Cwd)+len(res.Files) != 0 {
			t.Fatalf("session %v: stdout %q stderr %q files %+v: want IPython's and matplotlib's directories outside the home and "+
				"working directory, both empty, and no output file", session, res.Stdout, res.Stderr, res.Files)
		}
	}
}

// TestH58ResultFramesOnDescriptor3: H58 the program's own result frames on descriptor 3 are held
// to the displays' cap as they arrive, and one that is not a display is dropped.
func (s *Suite) TestH58ResultFramesOnDescriptor3(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec(`import os; os.write(3, b'{"type":"result","bytes":123456789012}\n' + b'x' * (2 << 20))`, HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOutputLimit)
	if !strings.Contains(res.Reason, "displays passed their cap") || len(res.Results) != 0 {
		t.Fatalf("reason %q results %+v", res.Reason, res.Results)
	}
	res = Exec(t, s.rt, 0, Spec(`import os; os.write(3, b'{"type":"result","bytes":5}\nnope!'); print("ok")`, HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "ok\n" || len(res.Results) != 0 {
		t.Fatalf("a display that is not one: stdout %q results %+v", res.Stdout, res.Results)
	}
	s.nextRunOK(t)
}

// TestNotebookProgramIsDroppedAfterADisplay: a run that displayed (so made IPython's shell)
// still ends as a script does: its objects' __del__ methods run with its globals there.
func (s *Suite) TestNotebookProgramIsDroppedAfterADisplay(t *testing.T) {
	code := "import sys\nPREFIX = 'del'\nclass C:\n    def __del__(self):\n        sys.stdout.write('%s %s\\n' % (PREFIX, self.n))\n" +
		"b = C(); b.n = 'cycle'; b.me = b\ndisplay(1)\nb"
	res := Exec(t, s.rt, 0, Spec(code, HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "del cycle\n" || res.Stderr != "" || len(res.Results) != 2 {
		t.Fatalf("stdout %q stderr %q results %d", res.Stdout, res.Stderr, len(res.Results))
	}
}
