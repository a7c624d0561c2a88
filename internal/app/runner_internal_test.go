package app

import (
	"context"
	"errors"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// countingRuntime ends every run ok, counting them.
type countingRuntime struct{ runs int }

func (r *countingRuntime) Ready(context.Context) error { return nil }
func (r *countingRuntime) Run(context.Context, int, sandbox.Spec, func(sandbox.Event)) (sandbox.Result, error) {
	r.runs++
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

// onceSessions keeps the requests given to RunOnce.
type onceSessions struct{ reqs []sandbox.Request }

func (s *onceSessions) RunOnce(_ context.Context, req sandbox.Request, _ func(sandbox.Event)) (sandbox.Result, error) {
	s.reqs = append(s.reqs, req)
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

// TestTemplateRunnerSendsTemplatesToSessions: saved code's and jobs' executor runs a request
// naming a template in a session of it, any other on the slots; its check does not refuse
// the template, as the slots' own does.
func TestTemplateRunnerSendsTemplatesToSessions(t *testing.T) {
	rt := &countingRuntime{}
	svc := engine.NewService(rt, engine.Hooks{}, engine.DefaultConfig(), nil)
	sessions := &onceSessions{}
	run := templateRunner{Service: svc, sessions: sessions}
	req := sandbox.Request{Code: "print(1)", Agent: "a", Template: "tools"}
	if err := run.Validate(req); err != nil {
		t.Fatalf("Validate of a template's request: %v", err)
	}
	var fe *sandbox.FieldError
	if err := svc.Validate(req); !errors.As(err, &fe) || fe.Field != "template" {
		t.Fatalf("the slots' own check of a template's request: %v", err)
	}
	if _, err := run.Execute(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	req.Template = ""
	if _, err := run.Execute(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	if len(sessions.reqs) != 1 || sessions.reqs[0].Template != "tools" || rt.runs != 1 {
		t.Fatalf("sessions got %+v, the slots ran %d; want the template's request in a session and the other on a slot", sessions.reqs, rt.runs)
	}
}
