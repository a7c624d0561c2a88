package sandboxtest

import (
	"encoding/json"
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
// table as well as its text.
func (s *Suite) TestNotebookDataFrameValue(t *testing.T) {
	s.needIPython(t, "pandas")
	res := Exec(t, s.rt, 0, Spec("import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3, 19]})\ndf", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
	main := mainResult(t, res)
	if main == nil || !strings.Contains(str(*main, "text/html"), "<table") || !strings.Contains(str(*main, "text/html"), "Lima") ||
		!strings.Contains(main.Text(), "Oslo") || res.Stdout != "" {
		t.Fatalf("results %+v stdout %q: want the DataFrame's table as text/html and text/plain", res.Results, res.Stdout)
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

// TestNotebookOversizedDisplayIsCut: a display larger than the cap on displays is replaced by
// its text/plain cut short with a note; the run ends ok within its caps.
func (s *Suite) TestNotebookOversizedDisplayIsCut(t *testing.T) {
	s.needIPython(t)
	code := "class Big:\n    def _repr_html_(self):\n        return 'x' * (50 << 20)\n    def __repr__(self):\n        return 'y' * (50 << 20)\nBig()"
	res := Exec(t, s.rt, 0, Spec(code, 60*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	m := mainResult(t, res)
	if m == nil || len(m.Data) != 1 || m.Text() == "" || len(m.Text()) > 8192 || !strings.HasPrefix(m.Text(), "yyyy") ||
		!strings.Contains(m.Note, "only its text/plain is kept") {
		t.Fatalf("main result: %d MIME types, text %.40q (%d bytes), note %q", len(m.Data), m.Text(), len(m.Text()), m.Note)
	}
}

// TestNotebookErrorIsReported: an uncaught exception comes back as the result's error (its
// name, message and traceback), and stderr is what python3 prints.
func (s *Suite) TestNotebookErrorIsReported(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("x = 1\n1 / 0", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeError)
	e := res.Error
	if e == nil || e.Name != "ZeroDivisionError" || e.Value != "division by zero" ||
		!strings.Contains(e.Traceback, `File "main.py", line 2`) || e.Traceback != res.Stderr || len(res.Results) != 0 {
		t.Fatalf("error %+v stderr %q results %+v", e, res.Stderr, res.Results)
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

// TestNotebookPrintIsOneEvent: print('Hello') arrives as one stdout event "Hello\n", every
// time; a partial line still arrives by itself before the program goes on.
func (s *Suite) TestNotebookPrintIsOneEvent(t *testing.T) {
	for i := range 100 {
		var events []sandbox.Event
		res := Exec(t, s.rt, 0, Spec("print('Hello')", HeavyImportTimeout), func(e sandbox.Event) { events = append(events, e) })
		expect(t, res, sandbox.OutcomeOK)
		if len(events) != 1 || events[0].Stream != sandbox.StreamStdout || events[0].Data != "Hello\n" {
			t.Fatalf("run %d: events %+v, want one stdout event \"Hello\\n\"", i, events)
		}
	}
	type stamped struct {
		data string
		at   time.Time
	}
	var got []stamped
	start := time.Now()
	res := Exec(t, s.rt, 0, Spec("import time\nprint('x', end='', flush=True)\ntime.sleep(3)\nprint('y')", HeavyImportTimeout),
		func(e sandbox.Event) { got = append(got, stamped{e.Data, time.Now()}) })
	expect(t, res, sandbox.OutcomeOK)
	if len(got) != 2 || got[0].data != "x" || got[1].data != "y\n" || got[0].at.Sub(start) > got[1].at.Sub(start)-time.Second {
		t.Fatalf("events %+v: want \"x\" well before \"y\\n\"", got)
	}
}

// TestNotebookSessionExecutionCount: a session's calls number their values; globals persist.
func (s *Suite) TestNotebookSessionExecutionCount(t *testing.T) {
	s.needIPython(t)
	slot := s.Slots - 1
	for i, c := range []struct{ code, value string }{{"a = 20\na", "20"}, {"b = a + 1", ""}, {"a + b", "41"}} {
		spec := Spec(c.code, HeavyImportTimeout)
		spec.Session = true
		res := Exec(t, s.Runtime, slot, spec, nil) // a session's call starts "session"
		expect(t, res, sandbox.OutcomeOK)
		if res.ExecutionCount != i+1 {
			t.Fatalf("call %d: execution_count %d", i+1, res.ExecutionCount)
		}
		if len(res.Files) != 0 { // IPython's profile README was one in a session's home
			t.Fatalf("call %d made no file, but lists %+v", i+1, res.Files)
		}
		m := mainResult(t, res)
		if (c.value == "") != (m == nil) || (m != nil && (m.Text() != c.value || m.ExecutionCount != i+1)) {
			t.Fatalf("call %d: main result %+v, want %q", i+1, m, c.value)
		}
	}
	// The slot serves one-shot runs again.
	res := Exec(t, s.rt, slot, Spec("print(1)", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeOK)
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
