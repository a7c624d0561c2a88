package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// fakeSecrets is engine.Secrets: every name but NOPE is a secret.
type fakeSecrets struct {
	mu   sync.Mutex
	runs []*fakeSecretsRun
}

func (f *fakeSecrets) Open(_ context.Context, agent string, names []string) (engine.SecretsRun, error) {
	if slices.Contains(names, "NOPE") {
		return nil, &sandbox.FieldError{Field: "secrets", Message: "NOPE is not a secret of agent " + agent}
	}
	r := &fakeSecretsRun{names: names}
	f.mu.Lock()
	f.runs = append(f.runs, r)
	f.mu.Unlock()
	return r, nil
}

// attachedTo returns the run of names attached to d, if any.
func (f *fakeSecrets) attachedTo(d sandbox.EgressDialer) *fakeSecretsRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.runs {
		r.mu.Lock()
		found := slices.ContainsFunc(r.gates, func(g sandbox.EgressRun) bool { return sandbox.EgressDialer(g) == d })
		r.mu.Unlock()
		if found {
			return r
		}
	}
	return nil
}

type fakeSecretsRun struct {
	names []string
	mu    sync.Mutex
	gates []sandbox.EgressRun
}

func (r *fakeSecretsRun) Env() map[string]string {
	env := map[string]string{}
	for _, n := range r.names {
		env[n] = "placeholder:" + n
	}
	return env
}

func (r *fakeSecretsRun) CA() string { return "PEM" }

func (r *fakeSecretsRun) Attach(g sandbox.EgressRun) {
	r.mu.Lock()
	r.gates = append(r.gates, g)
	r.mu.Unlock()
}

func (r *fakeSecretsRun) Take() ([]sandbox.SecretUse, int) { return nil, 0 }

// TestSessionSecretsFollowItsSandboxes: a session's secrets are checked when it is created,
// recorded by name, and added to the commands' egress of every sandbox it has: its first, the
// one a resume from hibernation gives it, and a fork's (issue 47: sessions named none).
func TestSessionSecretsFollowItsSandboxes(t *testing.T) {
	op := &egressOpener{}
	sec := &fakeSecrets{}
	dir, ledger := t.TempDir(), newMemLedger()
	m := newKeeper(newService(engine.Hooks{Egress: workspacePolicy{}, Secrets: sec}), op, ledger, lifecycleConfig(dir))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	ctx := t.Context()

	for _, req := range []sandbox.SessionRequest{
		{Agent: "a", Secrets: []string{"NOPE"}},
		{Agent: "a", Secrets: []string{"TOKEN"}, Env: map[string]string{"TOKEN": "plain"}},
	} {
		if _, err := m.Create(ctx, req); !isField(err, "secrets") {
			t.Errorf("creating %+v: %v, want a secrets field error", req, err)
		}
	}
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a", Secrets: []string{"TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Secrets, []string{"TOKEN"}) {
		t.Errorf("the session's record names secrets %v", s.Secrets)
	}
	if r := sec.attachedTo(op.box(s.ID).dialer()); r == nil || !slices.Equal(r.names, []string{"TOKEN"}) {
		t.Fatal("the session's commands' egress adds no secret")
	}
	first := op.box(s.ID)
	if _, err := m.Hibernate(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	fork, err := m.Fork(ctx, "a", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fork.Secrets, []string{"TOKEN"}) || sec.attachedTo(op.box(fork.ID).dialer()) == nil {
		t.Errorf("a fork's secrets: %v, attached: %v", fork.Secrets, sec.attachedTo(op.box(fork.ID).dialer()) != nil)
	}
	if _, err := m.Resume(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if b := op.box(s.ID); b == first || sec.attachedTo(b.dialer()) == nil {
		t.Error("the resumed session's new box adds no secret")
	}

	// Hibernated when the daemon stops: the next daemon opens its secrets as it wakes, not as
	// it starts (start-up reads no secret; the values are those of the wake).
	if _, err := m.Hibernate(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	sec2, op2 := &fakeSecrets{}, &egressOpener{}
	m2 := newKeeper(newService(engine.Hooks{Egress: workspacePolicy{}, Secrets: sec2}), op2, ledger, lifecycleConfig(dir))
	t.Cleanup(func() { m2.Shutdown(context.Background()) })
	if n, err := m2.Recover(ctx); err != nil || n == 0 {
		t.Fatalf("recover: %d, %v", n, err)
	}
	sec2.mu.Lock()
	opened := len(sec2.runs)
	sec2.mu.Unlock()
	if opened != 0 {
		t.Errorf("the restarted daemon opened %d secrets runs at start-up, want none before the wake", opened)
	}
	if _, err := m2.Resume(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if r := sec2.attachedTo(op2.box(s.ID).dialer()); r == nil || !slices.Equal(r.names, []string{"TOKEN"}) {
		t.Error("the session woken by the restarted daemon adds no secret")
	}

	// A daemon that adds no secrets refuses a session that names one.
	plain := newKeeper(newService(engine.Hooks{Egress: workspacePolicy{}}), &egressOpener{}, newMemLedger(), lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { plain.Shutdown(context.Background()) })
	if _, err := plain.Create(ctx, sandbox.SessionRequest{Agent: "a", Secrets: []string{"TOKEN"}}); !isField(err, "secrets") {
		t.Errorf("a session naming a secret where none are added: %v", err)
	}
}

func isField(err error, field string) bool {
	fe, ok := errors.AsType[*sandbox.FieldError](err)
	return ok && fe.Field == field
}

// startBox records, for each command started in it, whether its commands' egress was set.
type startBox struct {
	*egressBox
	egressAtStart []bool
}

func (b *startBox) StartCommand(_ context.Context, _ string, _ sandbox.CommandSpec, _ func(sandbox.ProcessEvent)) (int, error) {
	b.egressAtStart = append(b.egressAtStart, b.dialer() != nil)
	return 1, nil
}

// templateOpener opens template sessions as startBoxes.
type templateOpener struct {
	egressOpener
	last *startBox
}

func (o *templateOpener) OpenSessionImage(ctx context.Context, id, _ string) (sandbox.SessionBox, error) {
	b, _ := o.egressOpener.OpenSession(ctx, id)
	o.last = &startBox{egressBox: b.(*egressBox)}
	return o.last, nil
}

// serveTemplate is every template: a start command and no ready check.
type serveTemplate struct{}

func (serveTemplate) Resolve(_ context.Context, _, ref string) (template.Template, error) {
	return template.Template{Name: ref, Version: 4, Image: "img", Spec: apitype.TemplateSpec{Start: &apitype.TemplateStart{Cmd: "serve"}}}, nil
}

// TestTemplateStartCommandHasTheSessionsEgress: a template's start command starts with the
// session's egress already set, so that it can reach what the session's commands reach and
// use its secrets (red team, 5 December: its connections were refused until the session was
// live).
func TestTemplateStartCommandHasTheSessionsEgress(t *testing.T) {
	op := &templateOpener{}
	m := newKeeper(newService(engine.Hooks{Egress: workspacePolicy{}, Secrets: &fakeSecrets{}}), op, newMemLedger(), lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	m.SetTemplates(serveTemplate{})
	if _, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a", Template: "web", Secrets: []string{"TOKEN"}}); err != nil {
		t.Fatal(err)
	}
	if got := op.last.egressAtStart; len(got) != 1 || !got[0] {
		t.Fatalf("the start command's egress at its start: %v, want set", got)
	}
}

// TestTemplateCallsRecordTheTemplate: a call in a template's session says which template, and
// which version of it, its sandbox started from (the ledger keeps Origin; a new user found no
// trace of the template in a one-shot run's record, 5 December).
func TestTemplateCallsRecordTheTemplate(t *testing.T) {
	m := newKeeper(newService(engine.Hooks{}), &templateOpener{}, newMemLedger(), lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	m.SetTemplates(serveTemplate{})
	s, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "a", Template: "ops/web"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Execute(t.Context(), sandbox.Request{Code: "print(1)"}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Template != "ops/web" || res.TemplateVersion != 4 {
		t.Fatalf("the call's origin %+v, want template ops/web version 4", res.Origin)
	}
	plain, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := plain.Execute(t.Context(), sandbox.Request{Code: "print(1)"}, true, nil); err != nil || res.Template != "" || res.TemplateVersion != 0 {
		t.Fatalf("a call in a session of the daemon's image: %+v, %v; want no template", res.Origin, err)
	}
}

// crashBox's background command (a template's start command) ends at once with exit code 1
// and what its box kept of its stderr; every other command (the ready check) fails.
type crashBox struct{ *egressBox }

func (b *crashBox) StartCommand(_ context.Context, _ string, spec sandbox.CommandSpec, sink func(sandbox.ProcessEvent)) (int, error) {
	ev := sandbox.ProcessEvent{End: &sandbox.ProcessEnd{ExitCode: 1, Outcome: sandbox.OutcomeOK}}
	if spec.Background {
		ev.Tail = &sandbox.ProcessTail{Stderr: "starting\nerror: address already in use\n"}
	}
	go sink(ev)
	return 1, nil
}

type crashOpener struct{ egressOpener }

func (o *crashOpener) OpenSessionImage(ctx context.Context, id, _ string) (sandbox.SessionBox, error) {
	b, _ := o.egressOpener.OpenSession(ctx, id)
	return &crashBox{b.(*egressBox)}, nil
}

// crashTemplate's start command never gets ready.
type crashTemplate struct{}

func (crashTemplate) Resolve(_ context.Context, _, ref string) (template.Template, error) {
	return template.Template{Name: ref, Image: "img", Spec: apitype.TemplateSpec{Start: &apitype.TemplateStart{Cmd: "serve", Ready: "check", ReadyTimeoutMS: 10_000}}}, nil
}

// TestTemplateStartCommandThatEndsSaysWhatItWrote: a start command that ends before its ready
// check passes fails the session's create with its exit code and the end of its output, as
// invalid (a new user got "503, retry after 1s" and nothing of what it said).
func TestTemplateStartCommandThatEndsSaysWhatItWrote(t *testing.T) {
	m := newKeeper(newService(engine.Hooks{Egress: workspacePolicy{}}), &crashOpener{}, newMemLedger(), lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	m.SetTemplates(crashTemplate{})
	_, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a", Template: "web"})
	if err == nil || errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), `start command "serve" ended (exit code 1)`) ||
		!strings.Contains(err.Error(), "it wrote: starting | error: address already in use") {
		t.Fatalf("create: %v (class %v), want invalid, naming the exit code and the output", err, errclass.Of(err))
	}
}
