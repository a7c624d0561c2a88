// Package library is the code library: agents save Python scripts under a name, with their
// dependencies and the JSON Schemas (2020-12) of their input and output, and run them by name.
// Every save makes a new numbered version; the store keeps them all.
//
// Schemas are compiled when code is saved, so a bad schema is refused then, and must be
// self-contained: a $ref may point inside the schema (or to the 2020-12 meta-schemas) but never
// to a file or URL. A run's input is validated before anything runs; its OUTPUT is validated
// after, and a mismatch ends the execution with outcome output_invalid.
package library

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Store is the persistence the library needs; *store.Store satisfies it.
type Store interface {
	CreateCode(ctx context.Context, c store.Code) (store.Code, error)
	UpdateCode(ctx context.Context, c store.Code, expected int) (store.Code, error)
	GetCode(ctx context.Context, agent, name string, version int) (store.Code, error)
	ListCode(ctx context.Context, agent, filter string, p store.Page) ([]store.Code, string, error)
	ListCodeVersions(ctx context.Context, agent, name string) ([]store.CodeVersion, error)
	DeleteCode(ctx context.Context, agent, name string, force bool) ([]string, error)
}

// Executor runs requests; *engine.Service satisfies it.
type Executor interface {
	Execute(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)
}

// Templates resolves the templates saved code may name (*template.Service).
type Templates interface {
	// Resolve returns the agent's ready template ref (NAME, or OWNER/NAME of a shared one);
	// errors say why it cannot start.
	Resolve(ctx context.Context, agent, ref string) (template.Template, error)
}

// Library saves, finds and runs agents' code.
type Library struct {
	st        Store
	ex        Executor
	templates Templates // nil: code may name no template
	maxDeps   int
}

// New returns a library keeping code in st and running it with ex. maxDeps caps the
// dependencies of one script (requirement.MaxEntries when 0).
func New(st Store, ex Executor, maxDeps int) *Library {
	if maxDeps <= 0 {
		maxDeps = requirement.MaxEntries
	}
	return &Library{st: st, ex: ex, maxDeps: maxDeps}
}

// SetTemplates sets the templates saved code may name (call before serving); without it
// code naming one is refused. ex must then run a request naming a template (see
// sandbox.Request.Template).
func (l *Library) SetTemplates(t Templates) { l.templates = t }

// Draft is what a client saves: the content of one version.
type Draft struct {
	// Code is the Python source (required).
	Code string
	// Dependencies are PEP 508 requirement strings (see package requirement).
	Dependencies []string
	// InputSchema and OutputSchema are JSON Schemas (2020-12 when $schema is absent), or
	// absent/null for none.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Description says what the code does, for people and models choosing it.
	Description string
	// Template names the template whose sandbox runs the code (NAME, or OWNER/NAME of a
	// shared one; docs/templates.md); "" for the daemon's own image. It must be ready when
	// the code is saved.
	Template string
}

// MaxNameLength is the longest code name; MaxDescription the longest description, in bytes.
const (
	MaxNameLength  = 64
	MaxDescription = 4096
)

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// CheckName returns a *sandbox.FieldError when name is not a valid code name: 1 to 64
// lowercase letters, digits, '-' and '_', starting with a letter or digit.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return &sandbox.FieldError{Field: "name", Message: fmt.Sprintf(
			"%q is not a valid code name: use 1 to %d lowercase letters, digits, '-' or '_', starting with a letter or digit (for example \"sum-sales\")", name, MaxNameLength)}
	}
	return nil
}

func checkAgent(agent string) error {
	if err := sandbox.CheckAgent(agent); err != nil {
		return err
	}
	return nil
}

// check validates d, saved by agent, and returns it in the form stored: dependencies in
// canonical form, schemas compacted. Errors are *sandbox.FieldError, and the template's own
// (not found, not ready) when it cannot start.
func (l *Library) check(ctx context.Context, agent string, d Draft) (Draft, error) {
	if strings.TrimSpace(d.Code) == "" {
		return d, &sandbox.FieldError{Field: "code", Message: "is required: send the Python source to save"}
	}
	if len(d.Description) > MaxDescription {
		return d, &sandbox.FieldError{Field: "description", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(d.Description), MaxDescription)}
	}
	reqs, err := requirement.ParseList(d.Dependencies, l.maxDeps)
	if err != nil {
		return d, &sandbox.FieldError{Field: "dependencies", Message: err.Error()}
	}
	d.Dependencies = make([]string, len(reqs))
	for i, r := range reqs {
		d.Dependencies[i] = r.String()
	}
	for _, s := range []struct {
		field string
		raw   *json.RawMessage
	}{{"input_schema", &d.InputSchema}, {"output_schema", &d.OutputSchema}} {
		if isNull(*s.raw) {
			*s.raw = nil
			continue
		}
		if _, err := compile(s.field, *s.raw); err != nil {
			return d, &sandbox.FieldError{Field: s.field, Message: err.Error()}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, *s.raw); err != nil {
			return d, &sandbox.FieldError{Field: s.field, Message: "is not valid JSON: " + err.Error()}
		}
		*s.raw = buf.Bytes()
	}
	if d.Template != "" {
		if l.templates == nil {
			return d, &sandbox.FieldError{Field: "template", Message: "names a template, but this daemon has none (on runtime kubernetes, templates need kubernetes.template_registry or kubernetes.template_import_command); remove it"}
		}
		if _, err := l.templates.Resolve(ctx, agent, d.Template); err != nil {
			return d, err
		}
	}
	return d, nil
}

// Create saves d as version 1 of the agent's new code name. Errors: *sandbox.FieldError for
// invalid input, store.ErrExists (wrapped) when the name is taken.
func (l *Library) Create(ctx context.Context, agent, name string, d Draft) (store.Code, error) {
	if err := errors.Join(checkAgent(agent), CheckName(name)); err != nil {
		return store.Code{}, firstField(err)
	}
	d, err := l.check(ctx, agent, d)
	if err != nil {
		return store.Code{}, err
	}
	return l.st.CreateCode(ctx, codeOf(agent, name, d))
}

// Update saves d as the next version of the agent's code name. expected, when not 0, is the
// version the client last saw: another current version is a *store.VersionConflictError.
func (l *Library) Update(ctx context.Context, agent, name string, d Draft, expected int) (store.Code, error) {
	if err := errors.Join(checkAgent(agent), CheckName(name)); err != nil {
		return store.Code{}, firstField(err)
	}
	if expected < 0 {
		return store.Code{}, &sandbox.FieldError{Field: "expected_version", Message: fmt.Sprintf("is %d; versions start at 1", expected)}
	}
	d, err := l.check(ctx, agent, d)
	if err != nil {
		return store.Code{}, err
	}
	return l.st.UpdateCode(ctx, codeOf(agent, name, d), expected)
}

func codeOf(agent, name string, d Draft) store.Code {
	return store.Code{Agent: agent, Name: name, Code: d.Code, Dependencies: d.Dependencies,
		InputSchema: d.InputSchema, OutputSchema: d.OutputSchema, Description: d.Description, Template: d.Template}
}

func firstField(err error) error {
	var fe *sandbox.FieldError
	errors.As(err, &fe)
	return fe
}

// Get returns version of the agent's code name (0: the latest).
func (l *Library) Get(ctx context.Context, agent, name string, version int) (store.Code, error) {
	if err := CheckName(name); err != nil {
		return store.Code{}, err
	}
	return l.st.GetCode(ctx, agent, name, version)
}

// List returns the agent's code whose name or description contains filter, by name.
func (l *Library) List(ctx context.Context, agent, filter string, p store.Page) ([]store.Code, string, error) {
	return l.st.ListCode(ctx, agent, filter, p)
}

// Versions returns the history of the agent's code name, newest first.
func (l *Library) Versions(ctx context.Context, agent, name string) ([]store.CodeVersion, error) {
	return l.st.ListCodeVersions(ctx, agent, name)
}

// Delete deletes the agent's code name; see store.Store.DeleteCode for force and the jobs.
func (l *Library) Delete(ctx context.Context, agent, name string, force bool) ([]string, error) {
	return l.st.DeleteCode(ctx, agent, name, force)
}

// Run is a request to run saved code.
type Run struct {
	// Input is the JSON value given as INPUT; it must satisfy the input schema.
	Input json.RawMessage
	// TimeoutMS is the run's timeout in milliseconds; nil means the daemon's default.
	TimeoutMS *int64
	// Version runs that version instead of the latest (0).
	Version int
	// Files are written into the run's working directory before its code starts (see
	// sandbox.Request.Files). Transports decode them from their own form.
	Files []sandbox.InputFile
	// Charts, when not nil, turns saving charts as output files on or off for the run.
	Charts *bool
	// Secrets names the secrets the run may use (sandbox.Request.Secrets).
	Secrets []string
}

// Request builds the execution request for running the agent's saved code: it loads the code,
// validates run.Input against its input schema (an *InputError listing every failure when it
// does not hold) and attaches the output schema's check. origin's code fields are filled in.
func (l *Library) Request(ctx context.Context, agent, name string, run Run, origin sandbox.Origin) (sandbox.Request, store.Code, error) {
	if run.Version < 0 {
		return sandbox.Request{}, store.Code{}, &sandbox.FieldError{Field: "version", Message: fmt.Sprintf("is %d; versions start at 1 (0 or absent: the latest)", run.Version)}
	}
	code, err := l.st.GetCode(ctx, agent, name, run.Version)
	if err != nil {
		return sandbox.Request{}, store.Code{}, err
	}
	origin.CodeName, origin.CodeVersion = code.Name, code.Version
	req := sandbox.Request{Code: code.Code, Input: run.Input, TimeoutMS: run.TimeoutMS, Agent: agent, Origin: origin,
		Dependencies: code.Dependencies, Files: run.Files, Charts: run.Charts, Secrets: run.Secrets, Template: code.Template}
	// The request's own limits (the input's size and depth, the timeout) come before its
	// schema: they are cheaper, and their errors say what to change.
	if v, ok := l.ex.(interface{ Validate(sandbox.Request) error }); ok {
		if err := v.Validate(req); err != nil {
			return sandbox.Request{}, code, err
		}
	}
	if err := validateInput(ctx, code, run.Input, l.hold); err != nil {
		return sandbox.Request{}, code, err
	}
	if !isNull(code.OutputSchema) {
		sch, err := compile("output_schema", code.OutputSchema)
		if err != nil {
			return sandbox.Request{}, code, fmt.Errorf("code %q version %d: its stored output schema no longer compiles: %w", name, code.Version, err)
		}
		// The output is checked while the run holds its slot.
		req.CheckOutput = func(output json.RawMessage) error {
			v, err := validate("output_schema", sch, output)
			if err != nil {
				return fmt.Errorf("OUTPUT was not checked: %w", err)
			}
			if v != nil {
				return &OutputError{Violations: v}
			}
			return nil
		}
	}
	return req, code, nil
}

// Run runs the agent's saved code (see Request) and returns its result.
func (l *Library) Run(ctx context.Context, agent, name string, run Run, origin sandbox.Origin, emit func(sandbox.Event)) (sandbox.Result, error) {
	req, _, err := l.Request(ctx, agent, name, run, origin)
	if err != nil {
		return sandbox.Result{}, err
	}
	return l.ex.Execute(ctx, req, emit)
}

// Holder lets large validations wait for an execution slot, as runs do; *engine.Service is one.
type Holder interface {
	// Hold waits for a free slot for agent (a *sandbox.BusyError when the queue is full, or
	// agent has its executions_per_agent) and returns the function that gives it back.
	Hold(ctx context.Context, agent string) (release func(), err error)
}

// hold takes a slot from the executor when it is a Holder.
func (l *Library) hold(ctx context.Context, agent string) (func(), error) {
	if h, ok := l.ex.(Holder); ok {
		return h.Hold(ctx, agent)
	}
	return func() {}, nil
}

// validateInput is ValidateInput; with hold, a validation costing more than heldCost runs
// while holding what hold returns.
func validateInput(ctx context.Context, code store.Code, input json.RawMessage, hold func(context.Context, string) (func(), error)) error {
	if isNull(code.InputSchema) {
		return nil
	}
	sch, err := compile("input_schema", code.InputSchema)
	if err != nil {
		return fmt.Errorf("code %q version %d: its stored input schema no longer compiles: %w", code.Name, code.Version, err)
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("null")
	}
	m, bad, err := measure("input_schema", sch, input)
	if err != nil {
		return &sandbox.FieldError{Field: "input", Message: fmt.Sprintf("code %q version %d: %v", code.Name, code.Version, err)}
	}
	if bad == nil {
		if hold != nil && m.cost > heldCost {
			release, err := hold(ctx, code.Agent)
			if err != nil {
				return err
			}
			defer release()
		}
		bad = violationsOf(check(sch, m.doc))
	}
	if bad != nil {
		return &InputError{Code: code.Name, Version: code.Version, Violations: bad}
	}
	return nil
}

func isNull(v json.RawMessage) bool {
	t := bytes.TrimSpace(v)
	return len(t) == 0 || string(t) == "null"
}
