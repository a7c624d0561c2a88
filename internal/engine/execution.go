package engine

import (
	"context"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Execution is one execution that runs in a sandbox of its own (a session's box) rather than
// in a slot: the session keeper orders its calls and decides what a call's end does to the
// session, and the Service does the rest as for a one-shot run. Prepare makes it, Begin records
// it in the ledger, Run runs it under the daemon's deadline, Finish completes, checks and
// records its result.
type Execution struct {
	s *Service
	x *execution
}

// InBox says where an Execution runs: a session's sandbox.
type InBox struct {
	// Session is the session's ID, recorded with the execution; Box its sandbox.
	Session string
	Box     sandbox.SessionBox
	// Paths are the session's installed packages' directories.
	Paths []string
	// Grace is added to the daemon's deadline (the executor's own grace for an interrupted
	// call).
	Grace time.Duration
	// NetworkAllow is the session's narrowing of network_allow (nil: none); the request's own
	// narrows further.
	NetworkAllow []string
	// Secrets are the session's secrets (nil: none; see OpenSecrets): the call's code sees
	// their placeholders and its connections get their values.
	Secrets SecretsRun
	// Env is the session's environment for its interpreter (see sandbox.Spec.Env; nil: none).
	Env map[string]string
	// Template and TemplateVersion are the session's template, recorded with the execution
	// (sandbox.Origin; "" and 0: the daemon's own image).
	Template        string
	TemplateVersion int
	// Unrecorded: the call is the daemon's own in a sandbox no agent holds yet (a warm
	// session's warm-up), and the ledger keeps no record of it.
	Unrecorded bool
}

// Prepare turns req (checked by Validate) into an execution run in a session's sandbox.
func (s *Service) Prepare(req sandbox.Request, in InBox) *Execution {
	x := s.prepare(req)
	x.session, x.box, x.grace, x.narrow = in.Session, in.Box, in.Grace, in.NetworkAllow
	x.spec.Session, x.spec.Paths, x.spec.Env = true, in.Paths, in.Env
	x.origin.Template, x.origin.TemplateVersion = in.Template, in.TemplateVersion
	x.unrecorded = in.Unrecorded
	if in.Secrets != nil {
		x.secrets = in.Secrets
		x.spec.SecretEnv, x.spec.SecretCA = in.Secrets.Env(), in.Secrets.CA()
	}
	return &Execution{s: s, x: x}
}

// Spec returns the spec the execution runs (for a call the ledger does not keep, such as an
// interpreter's start: run it with the box's own Run).
func (e *Execution) Spec() sandbox.Spec { return e.x.spec }

// Begin records that the execution starts now. An error (wrapping ErrNotReady) means the ledger
// cannot keep it: it must not run.
func (e *Execution) Begin(ctx context.Context) error {
	e.x.accepted = time.Now().UTC()
	return e.s.begin(ctx, e.x)
}

// Run runs the execution in its box (see Service.Execute for the result's contract). An error
// wrapping ErrNotReady means it never started: its record is discarded.
func (e *Execution) Run(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error) {
	return e.s.run(ctx, e.x, emit)
}

// Finish completes res with what the Service knows of the execution, checks OUTPUT, records it
// and returns it.
func (e *Execution) Finish(ctx context.Context, res sandbox.Result) sandbox.Result {
	return e.s.finish(ctx, e.x, res)
}
