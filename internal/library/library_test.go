package library_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// echoRuntime "runs" code by returning OUTPUT = INPUT["out"], counting its runs.
type echoRuntime struct{ runs int }

var _ sandbox.Installer = (*echoRuntime)(nil)

func (r *echoRuntime) Ready(context.Context) error { return nil }

// Install finds every requirement present, as an image that has them all.
func (r *echoRuntime) Install(_ context.Context, _ int, req sandbox.InstallRequest, _ func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	var out sandbox.Installed
	for _, q := range req.Requirements {
		out.Dependencies = append(out.Dependencies, sandbox.DependencyStatus{Requirement: q, Status: sandbox.DependencyPresent, Version: "1.0"})
	}
	return out, nil
}
func (r *echoRuntime) Run(_ context.Context, _ int, spec sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	r.runs++
	var in struct {
		Out json.RawMessage `json:"out"`
	}
	_ = json.Unmarshal(spec.Input, &in)
	return sandbox.Result{Outcome: sandbox.OutcomeOK, Output: in.Out}, nil
}

func setup(t *testing.T) (*library.Library, *store.Store, *echoRuntime) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := &echoRuntime{}
	svc := engine.NewService(rt, engine.Hooks{Recorder: st}, engine.DefaultConfig(), nil)
	return library.New(st, svc, 0), st, rt
}

var draft = library.Draft{
	Code:         "OUTPUT = INPUT['out']",
	Dependencies: []string{"Tiny_Pkg==1.0"},
	InputSchema:  json.RawMessage(`{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 1}}}`),
	OutputSchema: json.RawMessage(`{"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}`),
	Description:  "adds things up",
}

func TestSaveUpdateRunValidated(t *testing.T) {
	lib, st, rt := setup(t)
	ctx := t.Context()
	v1, err := lib.Create(ctx, "a", "sum", draft)
	if err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || v1.Dependencies[0] != "tiny-pkg==1.0" || string(v1.InputSchema) != `{"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":1}}}` {
		t.Fatalf("saved %+v", v1)
	}
	d := draft
	d.Description = "adds things up, v2"
	v2, err := lib.Update(ctx, "a", "sum", d, 1)
	if err != nil || v2.Version != 2 {
		t.Fatalf("update: %+v %v", v2, err)
	}

	res, err := lib.Run(ctx, "a", "sum", library.Run{Input: json.RawMessage(`{"n": 2, "out": {"total": 3}}`)}, sandbox.Origin{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != sandbox.OutcomeOK || string(res.Output) != `{"total": 3}` || res.CodeName != "sum" || res.CodeVersion != 2 || res.Source != "api" ||
		len(res.Dependencies) != 1 || res.Dependencies[0].Requirement != "tiny-pkg==1.0" {
		t.Fatalf("valid run: %+v", res)
	}
	rec, err := st.GetExecution(ctx, res.ID)
	if err != nil || rec.CodeName != "sum" || rec.CodeVersion != 2 || rec.Outcome != sandbox.OutcomeOK {
		t.Fatalf("ledger record: %+v %v", rec, err)
	}

	// OUTPUT that breaks the output schema ends output_invalid, with the pointer, and is recorded so.
	res, err = lib.Run(ctx, "a", "sum", library.Run{Input: json.RawMessage(`{"n": 2, "out": {"total": "three"}}`)}, sandbox.Origin{Source: "cli"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != sandbox.OutcomeOutputInvalid || res.Success || !strings.Contains(res.Reason, "/total") {
		t.Fatalf("invalid output: %+v", res)
	}
	if rec, _ := st.GetExecution(ctx, res.ID); rec.Outcome != sandbox.OutcomeOutputInvalid || rec.Source != "cli" {
		t.Fatalf("ledger record of invalid output: %+v", rec)
	}

	// Invalid input: every failing field by pointer, and nothing runs.
	before := rt.runs
	_, err = lib.Run(ctx, "a", "sum", library.Run{Input: json.RawMessage(`{"n": 0}`)}, sandbox.Origin{}, nil)
	var inErr *library.InputError
	if !errors.As(err, &inErr) || len(inErr.Violations) != 1 || inErr.Violations[0].Pointer != "/n" {
		t.Fatalf("invalid input: %v", err)
	}
	if _, err := lib.Run(ctx, "a", "sum", library.Run{}, sandbox.Origin{}, nil); !errors.As(err, &inErr) {
		t.Fatalf("absent input against a schema requiring an object: %v", err)
	}
	if rt.runs != before {
		t.Fatal("code ran with invalid input")
	}

	// An older version still runs as it was.
	res, err = lib.Run(ctx, "a", "sum", library.Run{Version: 1, Input: json.RawMessage(`{"n": 1, "out": {"total": 1}}`)}, sandbox.Origin{}, nil)
	if err != nil || res.CodeVersion != 1 {
		t.Fatalf("version 1: %+v %v", res, err)
	}
	if _, err := lib.Run(ctx, "a", "sum", library.Run{Version: 9}, sandbox.Origin{}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing version: %v", err)
	}
}

func TestSaveRefusesBadContent(t *testing.T) {
	lib, _, _ := setup(t)
	cases := []struct {
		name, agent, code string
		mutate            func(*library.Draft)
		field, want       string
	}{
		{"name", "a", "Bad Name", nil, "name", "not a valid code name"},
		{"long name", "a", strings.Repeat("x", 65), nil, "name", "not a valid code name"},
		{"agent", "A!", "ok", nil, "agent", "not a valid agent name"},
		{"no code", "a", "ok", func(d *library.Draft) { d.Code = "  " }, "code", "required"},
		{"url dependency", "a", "ok", func(d *library.Draft) { d.Dependencies = []string{"pkg @ https://evil/x.whl"} }, "dependencies", "dependencies[0]"},
		{"pip option", "a", "ok", func(d *library.Draft) { d.Dependencies = []string{"numpy", "--index-url=http://evil"} }, "dependencies", "dependencies[1]"},
		{"bad schema keyword", "a", "ok", func(d *library.Draft) { d.InputSchema = json.RawMessage(`{"properties": {"n": {"minimum": "one"}}}`) }, "input_schema", "/properties/n/minimum"},
		{"schema not an object", "a", "ok", func(d *library.Draft) { d.OutputSchema = json.RawMessage(`"object"`) }, "output_schema", "must be a JSON Schema"},
		{"remote ref", "a", "ok", func(d *library.Draft) { d.InputSchema = json.RawMessage(`{"$ref": "file:///etc/passwd"}`) }, "input_schema", "self-contained"},
		{"http ref", "a", "ok", func(d *library.Draft) { d.InputSchema = json.RawMessage(`{"$ref": "http://127.0.0.1:1/s.json"}`) }, "input_schema", "self-contained"},
		{"ref cycle", "a", "ok", func(d *library.Draft) { d.InputSchema = json.RawMessage(`{"$ref": "#"}`) }, "input_schema", "$ref cycle"},
		{"two-step ref cycle", "a", "ok", func(d *library.Draft) {
			d.OutputSchema = json.RawMessage(`{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`)
		}, "output_schema", "$ref cycle"},
		{"deep schema", "a", "ok", func(d *library.Draft) {
			d.InputSchema = json.RawMessage(strings.Repeat(`{"items":`, 1000) + `{}` + strings.Repeat(`}`, 1000))
		}, "input_schema", "nested 1001 levels"},
		{"huge schema", "a", "ok", func(d *library.Draft) {
			d.InputSchema = json.RawMessage(`{"description": "` + strings.Repeat("x", 300<<10) + `"}`)
		}, "input_schema", "the limit is 262144 bytes"},
		{"huge description", "a", "ok", func(d *library.Draft) { d.Description = strings.Repeat("x", 5000) }, "description", "the limit is 4096"},
		{"name starting with -", "a", "-x", nil, "name", "starting with a letter or digit"},
		// allOf of two $refs to a schema that does the same, 30 levels deep: 2^30 evaluations of
		// any value, refused when saved.
		{"exponential refs", "a", "ok", func(d *library.Draft) { d.InputSchema = exponentialRefs(30) }, "input_schema", "the validation budget"},
		// A regular expression's matching costs its size times the text's (a 60 KB pattern took
		// 4 s of CPU against a 5 KB string): patterns are capped.
		{"huge pattern", "a", "ok", func(d *library.Draft) {
			d.InputSchema = json.RawMessage(`{"pattern": "^` + strings.Repeat("a?", 30000) + `$"}`)
		}, "input_schema", "the limit is 1024 bytes"},
		{"huge patternProperties", "a", "ok", func(d *library.Draft) {
			d.InputSchema = json.RawMessage(`{"patternProperties": {"` + strings.Repeat("(b|c)", 300) + `": {}}}`)
		}, "input_schema", "the limit is 1024 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := draft
			if c.mutate != nil {
				c.mutate(&d)
			}
			_, err := lib.Create(t.Context(), c.agent, c.code, d)
			var fe *sandbox.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Message, c.want) {
				t.Fatalf("got %v; want a %s error containing %q", err, c.field, c.want)
			}
		})
	}
}

// exponentialRefs is a schema whose level i is allOf of two $refs to level i-1.
func exponentialRefs(levels int) json.RawMessage {
	defs := []string{`"l0": {"type": "object"}`}
	for i := 1; i <= levels; i++ {
		defs = append(defs, fmt.Sprintf(`"l%d": {"allOf": [{"$ref": "#/$defs/l%d"}, {"$ref": "#/$defs/l%d"}]}`, i, i-1, i-1))
	}
	return json.RawMessage(fmt.Sprintf(`{"$defs": {%s}, "$ref": "#/$defs/l%d"}`, strings.Join(defs, ", "), levels))
}

// Inputs that would make the validator work without bound are refused before it starts, each
// within a second, with a 400-class field error on input naming the validation budget; an
// ordinary large input still validates.
func TestValidationIsBounded(t *testing.T) {
	lib, _, rt := setup(t)
	leaf := `[{"type":"string"},{"type":"object"},{"type":"boolean"},{"type":"null"}]`
	l2 := `{"anyOf":[` + strings.TrimSuffix(strings.Repeat(`{"anyOf":`+leaf+`},`, 4), ",") + `]}`
	nested := func(depth int, leafValue string) string {
		return strings.Repeat("[", depth) + leafValue + strings.Repeat("]", depth)
	}
	var rows []string
	for i := range 20_000 {
		rows = append(rows, fmt.Sprintf(`{"region": "r%d", "amount": %d}`, i%7, i))
	}
	cases := []struct {
		name, schema, input string
		valid               bool // the input fits: it validates and runs
	}{
		{"H31", `{"type":"array","items":{"anyOf":[` + strings.TrimSuffix(strings.Repeat(l2+",", 4), ",") + `]}}`,
			"[" + strings.TrimSuffix(strings.Repeat("0,", 40_000), ",") + "]", false},
		// items and contains both refer back to the whole schema: 2^400 for arrays nested 400 deep.
		{"items and contains recursion", `{"items": {"$ref": "#"}, "contains": {"$ref": "#"}}`, nested(400, "0"), false},
		// dependentSchemas fan out on the same object, four ways a level.
		{"dependentSchemas fan-out", dependentFanOut(12), `{"a": 1, "b": 1, "c": 1, "d": 1}`, false},
		// Each number is read as an exact fraction for minimum: 1e100000 takes a millisecond.
		{"huge exponents", `{"items": {"minimum": 0}}`, "[" + strings.TrimSuffix(strings.Repeat("1e100000,", 2000), ",") + "]", false},
		// A number the validator cannot read as a fraction at all (it used to panic on it).
		{"unreadable number", `{"minimum": 0}`, "1e99999999", false},
		// A hundred patterns over a long string.
		{"patterns over a long string", `{"anyOf": [` + strings.TrimSuffix(strings.Repeat(`{"pattern": "a+$"},`, 100), ",") + `]}`,
			`"` + strings.Repeat("a", 900_000) + `b"`, false},
		{"20 000 rows", `{"type": "array", "items": {"type": "object", "required": ["region", "amount"],
			"properties": {"region": {"type": "string"}, "amount": {"type": "number", "minimum": 0}}}}`, "[" + strings.Join(rows, ",") + "]", true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("c%d", i)
			if _, err := lib.Create(t.Context(), "a", name, library.Draft{Code: "x", InputSchema: json.RawMessage(c.schema)}); err != nil {
				t.Fatalf("save: %v", err)
			}
			// The budget counts schema evaluations, not time: a refusal that names it proves the
			// work was bounded, on any machine.
			runs := rt.runs
			_, err := lib.Run(t.Context(), "a", name, library.Run{Input: json.RawMessage(c.input)}, sandbox.Origin{Source: "api"}, nil)
			var fe *sandbox.FieldError
			switch {
			case c.valid && (err != nil || rt.runs != runs+1):
				t.Fatalf("a valid input: %v", err)
			case !c.valid && (!errors.As(err, &fe) || fe.Field != "input" || !strings.Contains(fe.Message, "validation budget") || rt.runs != runs):
				t.Fatalf("got %v; want a field error on input naming the validation budget, and no run", err)
			}
		})
	}
}

// dependentFanOut is a schema whose level i has dependentSchemas a, b, c and d, each a $ref
// to level i-1, under not (where the validator only wants a yes or no).
func dependentFanOut(levels int) string {
	defs := []string{`"l0": {"required": ["zz"]}`}
	for i := 1; i <= levels; i++ {
		var deps []string
		for _, p := range []string{"a", "b", "c", "d"} {
			deps = append(deps, fmt.Sprintf(`"%s": {"$ref": "#/$defs/l%d"}`, p, i-1))
		}
		defs = append(defs, fmt.Sprintf(`"l%d": {"dependentSchemas": {%s}}`, i, strings.Join(deps, ", ")))
	}
	return fmt.Sprintf(`{"$defs": {%s}, "not": {"$ref": "#/$defs/l%d"}}`, strings.Join(defs, ", "), levels)
}

// blockingRuntime runs until release is closed.
type blockingRuntime struct {
	echoRuntime
	started, release chan struct{}
}

func (r *blockingRuntime) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	r.started <- struct{}{}
	<-r.release
	return r.echoRuntime.Run(ctx, slot, spec, emit)
}

// A large validation waits for an execution slot as runs do: with the only slot busy and no
// queue, a large invalid input is refused busy, while a small one is still checked at once.
func TestLargeValidationTakesASlot(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := &blockingRuntime{started: make(chan struct{}), release: make(chan struct{})}
	cfg := engine.DefaultConfig()
	cfg.Slots, cfg.QueueLength = 1, 0
	lib := library.New(st, engine.NewService(rt, engine.Hooks{Recorder: st}, cfg, nil), 0)
	if _, err := lib.Create(t.Context(), "a", "strings", library.Draft{Code: "x", InputSchema: json.RawMessage(`{"items": {"type": "string"}}`)}); err != nil {
		t.Fatal(err)
	}
	run := func(input string) error {
		_, err := lib.Run(t.Context(), "a", "strings", library.Run{Input: json.RawMessage(input)}, sandbox.Origin{Source: "api"}, nil)
		return err
	}
	done := make(chan error)
	go func() { done <- run(`["x"]`) }()
	<-rt.started
	var inErr *library.InputError
	if err := run(`[1]`); !errors.As(err, &inErr) {
		t.Fatalf("a small invalid input while the slot is busy: %v; want an InputError at once", err)
	}
	var busy *sandbox.BusyError
	if err := run("[" + strings.TrimSuffix(strings.Repeat("1,", 20_000), ",") + "]"); !errors.As(err, &busy) {
		t.Fatalf("a large invalid input while the slot is busy: %v; want a BusyError (its validation waits for a slot)", err)
	}
	close(rt.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// templates resolves the one template "tools" of agent "a".
type templates struct{}

func (templates) Resolve(_ context.Context, agent, ref string) (template.Template, error) {
	if agent == "a" && ref == "tools" {
		return template.Template{Agent: agent, Name: ref, Version: 3}, nil
	}
	return template.Template{}, fmt.Errorf("template %q: %w", ref, store.ErrNotFound)
}

// recorder is an executor keeping the requests it is given.
type recorder struct {
	*engine.Service
	reqs []sandbox.Request
}

// Validate checks the request as the engine does; its template is checked by its session.
func (r *recorder) Validate(req sandbox.Request) error {
	req.Template = ""
	return r.Service.Validate(req)
}

func (r *recorder) Execute(_ context.Context, req sandbox.Request, _ func(sandbox.Event)) (sandbox.Result, error) {
	r.reqs = append(r.reqs, req)
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

func TestCodeNamingATemplate(t *testing.T) {
	lib, st, _ := setup(t)
	ctx := t.Context()
	d := library.Draft{Code: "print(1)", Template: "tools"}

	// A daemon without templates refuses the field, naming it.
	var fe *sandbox.FieldError
	if _, err := lib.Create(ctx, "a", "report", d); !errors.As(err, &fe) || fe.Field != "template" {
		t.Fatalf("template on a daemon without templates: %v", err)
	}
	// The engine's slots refuse a request naming a template instead of running the default
	// image: a caller that forgot the sessions fails, never drops the template unsaid.
	svc := engine.NewService(&echoRuntime{}, engine.Hooks{Recorder: st}, engine.DefaultConfig(), nil)
	if _, err := svc.Execute(ctx, sandbox.Request{Code: "print(1)", Template: "tools"}, nil); !errors.As(err, &fe) || fe.Field != "template" {
		t.Fatalf("the engine ran a template's request: %v", err)
	}

	ex := &recorder{Service: svc}
	lib = library.New(st, ex, 0)
	lib.SetTemplates(templates{})
	if _, err := lib.Create(ctx, "a", "report", library.Draft{Code: "print(1)", Template: "missing"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a template that does not exist: %v", err)
	}
	if _, err := lib.Create(ctx, "b", "report", d); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another agent's template: %v", err)
	}
	v1, err := lib.Create(ctx, "a", "report", d)
	if err != nil || v1.Template != "tools" {
		t.Fatalf("saved %+v %v", v1, err)
	}
	if _, err := lib.Update(ctx, "a", "report", library.Draft{Code: "print(2)"}, 1); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{1, 2} {
		if _, err := lib.Run(ctx, "a", "report", library.Run{Version: v}, sandbox.Origin{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if len(ex.reqs) != 2 || ex.reqs[0].Template != "tools" || ex.reqs[1].Template != "" || ex.reqs[0].Origin.CodeVersion != 1 {
		t.Fatalf("requests run: %+v", ex.reqs)
	}
	got, err := lib.Get(ctx, "a", "report", 1)
	if err != nil || got.Template != "tools" {
		t.Fatalf("version 1 as stored: %+v %v", got, err)
	}
	if list, _, _ := lib.List(ctx, "a", "", store.Page{}); len(list) != 1 || list[0].Template != "" {
		t.Fatalf("the latest version has no template: %+v", list)
	}
}
