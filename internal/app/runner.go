package app

import (
	"context"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// templateRunner is the executor of saved code and jobs: a request naming a template runs in
// a session of it made for the run (session.Registry.RunOnce), any other on the engine's
// slots. The rest of the engine's methods (Hold, OpenSecrets, …) are its own.
type templateRunner struct {
	*engine.Service
	sessions interface {
		RunOnce(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)
	}
}

// Execute runs req as described on templateRunner.
func (t templateRunner) Execute(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
	if req.Template != "" {
		return t.sessions.RunOnce(ctx, req, emit)
	}
	return t.Service.Execute(ctx, req, emit)
}

// Validate checks req against the engine's limits; its template is checked when its session
// is made.
func (t templateRunner) Validate(req sandbox.Request) error {
	req.Template = ""
	return t.Service.Validate(req)
}
