package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Config holds the Service's limits. Zero values are invalid; use DefaultConfig.
type Config struct {
	// Slots is how many runs execute at once (each in its own slot, with its own uid).
	Slots int
	// QueueLength is how many requests may wait for a free slot; more get a BusyError.
	QueueLength int
	// ExecutionsPerAgent caps one agent's executions in slots plus those it has queued; more
	// get a BusyError naming the agent (0: no cap). DefaultExecutionsPerAgent gives the
	// default. Whatever the cap, a freed slot goes to the waiting agent that holds the fewest.
	ExecutionsPerAgent int
	// DefaultTimeout applies when a request names none; MaxTimeout is the hard cap.
	DefaultTimeout, MaxTimeout time.Duration
	// Grace is how long past a run's timeout the daemon waits for the executor's answer before
	// it gives up on the run with outcome sandbox_error (the outermost timeout layer).
	Grace time.Duration
	// MaxCodeBytes caps Request.Code; MaxInputBytes caps Request.Input's JSON text.
	MaxCodeBytes, MaxInputBytes int
	// Limits are the per-run limits the executor enforces.
	Limits sandbox.Limits
	// Network is the box's network policy, "allowlist", "full" or "none", as the runtime set
	// it up. With "none" a dependency that is not installed fails without trying pip.
	Network string
	// NetworkAllow and NetworkAllowInstall are, with network "allowlist", what runs and what
	// installs may reach (shown by GET /v1/limits; the EgressPolicy enforces them).
	NetworkAllow, NetworkAllowInstall []string
	// MaxDependencies caps Request.Dependencies (requirement.MaxEntries by default).
	MaxDependencies int
	// InstallTimeout bounds each dependency's install.
	InstallTimeout time.Duration
	// MaxCalls caps a run's agent.* calls; MaxCallBytes each call's arguments and answer (JSON
	// bytes); CallTimeout how long the host may take to answer one.
	MaxCalls     int
	MaxCallBytes int
	CallTimeout  time.Duration
	// MaxInputFiles caps Request.Files; MaxInputFileBytes each file's size and
	// MaxInputFilesBytes their total, in bytes.
	MaxInputFiles      int
	MaxInputFileBytes  int64
	MaxInputFilesBytes int64
	// Charts is the default of Request.Charts: save open figures and shown images as output
	// files.
	Charts bool
	// Notebook runs code as a notebook cell (results, IPython syntax); false as a plain script
	// (Spec.Plain).
	Notebook bool
}

// DefaultConfig returns the seed defaults: 4 slots, a queue of 16, 30 s default and 600 s
// maximum timeout, 1 MiB code and input, 512 MiB memory, 1 MiB stdout, stderr and OUTPUT, 50
// dependencies with 120 s to install each; 64 input files (8 MiB each, 16 MiB in all) and as
// many output files under the same caps, charts saved.
func DefaultConfig() Config {
	return Config{
		Slots:              4,
		QueueLength:        16,
		ExecutionsPerAgent: DefaultExecutionsPerAgent(4, 16),
		DefaultTimeout:     30 * time.Second,
		MaxTimeout:         600 * time.Second,
		Grace:              3 * time.Second,
		Network:            "allowlist",
		MaxCodeBytes:       1 << 20,
		MaxInputBytes:      1 << 20,
		MaxDependencies:    requirement.MaxEntries,
		InstallTimeout:     120 * time.Second,
		MaxCalls:           1000,
		MaxCallBytes:       4 << 20,
		CallTimeout:        10 * time.Second,
		MaxInputFiles:      64,
		MaxInputFileBytes:  8 << 20,
		MaxInputFilesBytes: 16 << 20,
		Charts:             true,
		Notebook:           true,
		Limits:             sandbox.DefaultLimits(),
	}
}

// DefaultExecutionsPerAgent is the default cap on one agent's executions (in slots plus
// queued): max(1, slots-1) + queue/2, which leaves every other agent at least one slot's place
// and half the queue's (4 slots and a queue of 16: 11).
func DefaultExecutionsPerAgent(slots, queue int) int { return max(1, slots-1) + queue/2 }

// Hooks connect a Service to the rest of the daemon; nil fields do nothing.
type Hooks struct {
	// Recorder keeps the ledger.
	Recorder sandbox.Recorder
	// Callbacks answer programs' agent.* calls.
	Callbacks sandbox.Callbacks
	// Files keeps runs' output files; nil drops them (the result still lists them).
	Files sandbox.FileStore
	// Egress makes runs' and installs' dialers under network "allowlist"; nil refuses every
	// connection through the proxy.
	Egress sandbox.EgressPolicy
	// Secrets resolves the secrets a request names (package secrets); nil refuses a request
	// that names any.
	Secrets Secrets
}

// Secrets resolves the secrets runs name (*secrets.Source).
type Secrets interface {
	// Open resolves names for agent's run: an unknown name is a *sandbox.FieldError of field
	// "secrets".
	Open(ctx context.Context, agent string, names []string) (SecretsRun, error)
}

// SecretsRun is one run's secrets, or one session's (for all its calls and commands).
type SecretsRun interface {
	// Env is each secret's placeholder by environment variable; CA the PEM the box trusts for
	// the secrets' hosts.
	Env() map[string]string
	CA() string
	// Attach has gate add the values for their hosts (any number of gates).
	Attach(gate sandbox.EgressRun)
	// Take returns each use of a placeholder since the last Take (never a value), at most
	// 256, and how many more were left out.
	Take() ([]sandbox.SecretUse, int)
}

// Service validates execution requests, assigns them slots, queues them when every slot is
// busy, and layers the daemon's deadline over the runtime's. It is safe for concurrent use.
type Service struct {
	rt    sandbox.Runtime
	rec   sandbox.Recorder
	cb    sandbox.Callbacks
	files sandbox.FileStore
	net   sandbox.EgressPolicy
	sec   Secrets
	cfg   Config
	log   *slog.Logger

	// base ends every execution when Interrupt is called.
	base      context.Context
	interrupt context.CancelCauseFunc

	// slots hands out the runtime's slots.
	slots *pool
}

// NewService returns a Service running on rt with cfg's limits, recording every run that starts
// and answering programs' calls through hooks. cfg must be valid (at least one slot, positive
// timeouts: config.Config.Validate checks it); log may be nil.
func NewService(rt sandbox.Runtime, hooks Hooks, cfg Config, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, interrupt := context.WithCancelCause(context.Background())
	s := &Service{rt: rt, rec: hooks.Recorder, cb: hooks.Callbacks, files: hooks.Files, net: hooks.Egress, sec: hooks.Secrets, cfg: cfg, log: log,
		base: base, interrupt: interrupt}
	s.slots = newPool(base, rt, cfg, log)
	return s
}

// ErrInterrupted is the cause of executions ended by Interrupt.
var ErrInterrupted = errors.New("interrupted: the daemon is shutting down")

// Interrupt ends every running and queued execution (running ones with outcome
// sandbox_error and a reason starting "interrupted") and refuses new ones with ErrNotReady.
// A stopping daemon calls it when in-flight requests did not finish in time.
func (s *Service) Interrupt() { s.interrupt(ErrInterrupted) }

// Config returns the limits the Service enforces.
func (s *Service) Config() Config { return s.cfg }

// Ready reports whether a run started now would be served.
func (s *Service) Ready(ctx context.Context) error { return s.rt.Ready(ctx) }

// Stats is a snapshot of the slots and the queue.
type Stats struct {
	Slots   int `json:"slots"`
	Busy    int `json:"busy"`
	Waiting int `json:"waiting"`
}

// Stats returns how many slots are busy and how many requests wait.
func (s *Service) Stats() Stats {
	return s.slots.stats()
}

// Validate checks req against the limits and returns a *FieldError naming the first bad field.
func (s *Service) Validate(req sandbox.Request) error {
	if req.Template != "" {
		// A template's run is a session of it (session.Registry.RunOnce); the slots run the
		// daemon's own image, and running it there would drop the template unsaid.
		return &sandbox.FieldError{Field: "template", Message: "is not served by this daemon's execution slots: a template's run needs the sessions (the Docker runtime)"}
	}
	if req.Code == "" {
		return &sandbox.FieldError{Field: "code", Message: "is required: send the Python source to run"}
	}
	if len(req.Code) > s.cfg.MaxCodeBytes {
		return &sandbox.FieldError{Field: "code", TooLarge: true,
			Message: fmt.Sprintf("is %d bytes; the limit is %d bytes", len(req.Code), s.cfg.MaxCodeBytes)}
	}
	if !utf8.ValidString(req.Code) {
		return &sandbox.FieldError{Field: "code", Message: "is not valid UTF-8"}
	}
	if strings.IndexByte(req.Code, 0) >= 0 {
		return &sandbox.FieldError{Field: "code", Message: "contains a NUL byte, which Python source cannot hold"}
	}
	if len(req.Input) > s.cfg.MaxInputBytes {
		return &sandbox.FieldError{Field: "input", TooLarge: true,
			Message: fmt.Sprintf("is %d bytes of JSON; the limit is %d bytes", len(req.Input), s.cfg.MaxInputBytes)}
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return &sandbox.FieldError{Field: "input", Message: "is not valid JSON"}
	}
	if d := sandbox.JSONDepth(req.Input); d > sandbox.MaxInputDepth {
		return &sandbox.FieldError{Field: "input", Message: fmt.Sprintf(
			"is nested %d levels deep; the limit is %d levels (Python's JSON reader stops near 1000)", d, sandbox.MaxInputDepth)}
	}
	if req.TimeoutMS != nil {
		if err := sandbox.CheckTimeout(*req.TimeoutMS, s.cfg.MaxTimeout, fmt.Sprintf("omit it for the default of %d", s.cfg.DefaultTimeout.Milliseconds())); err != nil {
			return err
		}
	}
	if req.ID != "" && !sandbox.ValidID(req.ID) {
		return &sandbox.FieldError{Field: "id", Message: fmt.Sprintf("%q is not an execution ID (\"ex_\" and 26 base32 letters)", req.ID)}
	}
	switch req.Origin.Source {
	case "", sandbox.SourceAPI, sandbox.SourceCLI, sandbox.SourceMCP, sandbox.SourceJob:
	default:
		return &sandbox.FieldError{Field: "source", Message: fmt.Sprintf("%q is not a source: use api, cli, mcp or job", req.Origin.Source)}
	}
	if _, err := requirement.ParseList(req.Dependencies, s.cfg.MaxDependencies); err != nil {
		return &sandbox.FieldError{Field: "dependencies", Message: err.Error()}
	}
	if req.Agent != "" {
		if err := sandbox.CheckAgent(req.Agent); err != nil {
			return err
		}
	}
	if err := s.CheckNetworkAllow(req.NetworkAllow); err != nil {
		return err
	}
	if len(req.Secrets) > 0 && (s.sec == nil || s.net == nil) {
		return s.noSecrets()
	}
	return validateFiles(req.Files, s.cfg)
}

// noSecrets is the answer to a request that names secrets where the daemon adds none.
func (s *Service) noSecrets() error {
	return &sandbox.FieldError{Field: "secrets", Message: fmt.Sprintf(
		"this daemon adds secrets only under network \"allowlist\" (it is %q); send the request without secrets", s.cfg.Network)}
}

// OpenSecrets resolves the secrets names (nil when none) for agent's session, whose calls
// (InBox.Secrets) and commands' connections (AttachSecrets) use them. Errors: a
// *sandbox.FieldError of field "secrets" for a name agent may not use, or where the daemon
// adds no secrets.
func (s *Service) OpenSecrets(ctx context.Context, agent string, names []string) (SecretsRun, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if s.sec == nil || s.net == nil {
		return nil, s.noSecrets()
	}
	return s.sec.Open(ctx, agent, names)
}

// CheckNetworkAllow validates a narrowing of the daemon's network_allow (a request's or a
// session's; nil narrows nothing): a *FieldError for network_allow naming what it would widen.
func (s *Service) CheckNetworkAllow(allow []string) error {
	switch {
	case allow == nil:
		return nil
	case s.net == nil && s.cfg.Network == sandbox.NetworkAllowlist && len(allow) > 0:
		// An allowlist with no egress policy attached lets nothing out: any entry widens it.
		return &sandbox.FieldError{Field: "network_allow", Message: fmt.Sprintf(
			"%s is not allowed: this daemon lets runs reach no host, and a request may only narrow what the daemon's network_allow allows; ask its operator to add it to network_allow",
			strings.Join(allow, ", "))}
	case s.net == nil && s.cfg.Network != sandbox.NetworkAllowlist:
		return &sandbox.FieldError{Field: "network_allow", Message: fmt.Sprintf(
			"applies only when the daemon's network is \"allowlist\" (it is %q); send the request without it", s.cfg.Network)}
	case s.net == nil:
		return nil // an empty list narrows nothing away
	}
	if err := s.net.CheckAllow(allow); err != nil {
		return &sandbox.FieldError{Field: "network_allow", Message: err.Error()}
	}
	return nil
}

// WorkspaceEgress returns the dialer of a session's commands under network "allowlist": what
// its runs may reach (the daemon's network_allow narrowed by allow when it is not nil) and,
// unless allow narrows, the package index; nil when the daemon has no egress policy. record,
// when not nil, is given each connection's record as it ends.
func (s *Service) WorkspaceEgress(allow []string, record func(sandbox.EgressConnection)) sandbox.EgressRun {
	if s.net == nil {
		return nil
	}
	return s.net.ForWorkspace(allow, record)
}

// Execute validates req, waits for a free slot, runs it and returns its Result.
//
// Errors: a *FieldError for an invalid request, a *BusyError when every slot is running and the
// queue is full, an error wrapping ErrNotReady when the sandbox cannot start the run, or ctx's
// error when ctx ends while waiting for a slot. Once the run has started, every failure
// (including the system's) is reported as a Result with its Outcome and a nil error.
// emit, when not nil, receives output chunks as they happen (see Runtime); an output file's
// event comes once Hooks.Files has stored it, without its content.
func (s *Service) Execute(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
	if err := s.Validate(req); err != nil {
		return sandbox.Result{}, err
	}
	if s.base.Err() != nil {
		return sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, context.Cause(s.base))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.base, func() { cancel(context.Cause(s.base)) })
	defer stop()
	x := s.prepare(req)
	if len(req.Secrets) > 0 {
		sec, err := s.sec.Open(ctx, x.agent, req.Secrets)
		if err != nil {
			return sandbox.Result{}, err
		}
		x.secrets = sec
		x.spec.SecretEnv, x.spec.SecretCA = sec.Env(), sec.CA()
	}

	// The slot is taken first: it bounds installs as it bounds runs, and the execution is in
	// the ledger from here, so a crash during an install is recorded too.
	slot, err := s.slots.acquire(ctx, x.agent, s.holdOf(x))
	if err != nil {
		return sandbox.Result{}, err
	}
	defer s.slots.release(slot, x.agent)
	x.slot, x.accepted = slot, time.Now().UTC() // the execution's started_at, whatever it installs first
	if err := s.begin(ctx, x); err != nil {
		return sandbox.Result{}, err
	}

	// Dependencies are installed before the run's clock starts: install time is not charged
	// to its timeout.
	if len(req.Dependencies) > 0 {
		began := time.Now()
		x.deps, x.installEgress, err = s.install(ctx, slot, req.Dependencies, emit)
		x.installMS = time.Since(began).Milliseconds()
		switch {
		case err != nil:
			res := s.systemFailure(ctx, ctx, sandbox.Result{ExitCode: -1}, began, fmt.Errorf("installing the dependencies: %w", err))
			return s.finish(ctx, x, res), nil
		case len(x.deps.Failed()) > 0:
			return s.finish(ctx, x, s.dependencyError(x.deps)), nil
		}
		x.spec.Paths = x.deps.Paths
	}
	res, err := s.run(ctx, x, emit)
	if err != nil {
		return sandbox.Result{}, err
	}
	return s.finish(ctx, x, res), nil
}

// execution is what the Service knows of one execution on its way: the request, the spec it
// became, and what the steps before the run found.
type execution struct {
	req    sandbox.Request
	spec   sandbox.Spec
	agent  string
	origin sandbox.Origin
	// slot is the slot it runs in; accepted is when it took the slot (its started_at).
	slot     int
	accepted time.Time
	// deps and installMS are its dependencies' statuses and how long installing them took;
	// installEgress the install's outbound connections (network "allowlist").
	deps          sandbox.Installed
	installMS     int64
	installEgress []sandbox.EgressConnection
	// audit lists the run's agent.* calls.
	audit []sandbox.CallRecord
	// files keeps the run's output files as they arrive.
	files *fileSink
	// session is the session the execution is a call of ("" for a one-shot run); box runs it
	// there (nil: the pool's slot runs it), with grace added to the daemon's deadline.
	session string
	box     sandbox.SessionBox
	grace   time.Duration
	// narrow is the session's narrowing of network_allow (nil: none), before the request's.
	narrow []string
	// secrets are the run's secrets (nil: none).
	secrets SecretsRun
	// unrecorded: the ledger keeps no record of it (InBox.Unrecorded).
	unrecorded bool
}

// holdOf is how long x may hold its slot: its timeout and Grace, and InstallTimeout for each
// dependency it names.
func (s *Service) holdOf(x *execution) time.Duration {
	return time.Duration(x.spec.TimeoutMS)*time.Millisecond + s.cfg.Grace + time.Duration(len(x.req.Dependencies))*s.cfg.InstallTimeout
}

// prepare turns a validated request into its execution: the spec with its ID, input, timeout,
// limits, files and charts resolved, and the agent and origin with their defaults.
func (s *Service) prepare(req sandbox.Request) *execution {
	spec := sandbox.Spec{
		ID:        req.ID,
		Code:      req.Code,
		Input:     req.Input,
		TimeoutMS: s.cfg.DefaultTimeout.Milliseconds(),
		Limits:    s.cfg.Limits,
		Files:     req.Files,
		Charts:    s.cfg.Charts,
		Plain:     !s.cfg.Notebook,
		Internal:  req.Internal,
		// E2B's /execute: the traceback as the error only.
		TracebackInErrorOnly: req.TracebackInErrorOnly,
	}
	if spec.ID == "" {
		spec.ID = sandbox.NewID()
	}
	if len(spec.Input) == 0 {
		spec.Input = json.RawMessage("null")
	}
	if req.TimeoutMS != nil {
		spec.TimeoutMS = *req.TimeoutMS
	}
	if req.Charts != nil {
		spec.Charts = *req.Charts
	}
	x := &execution{req: req, spec: spec, agent: req.Agent, origin: req.Origin}
	if x.origin.Source == "" {
		x.origin.Source = sandbox.SourceAPI
	}
	if x.agent == "" {
		x.agent = "default"
	}
	x.files = &fileSink{store: s.files, id: spec.ID}
	return x
}

// begin records that x is starting. An error means the ledger cannot keep it: nothing runs.
func (s *Service) begin(ctx context.Context, x *execution) error {
	if s.rec == nil || x.unrecorded {
		return nil
	}
	head := sandbox.Result{ID: x.spec.ID, Agent: x.agent, TimeoutMS: x.spec.TimeoutMS, StartedAt: x.accepted, Origin: x.origin, SessionID: x.session}
	if err := s.rec.Begin(ctx, x.spec, head); err != nil {
		// Nothing ran: the daemon cannot keep its ledger (a full or read-only disk).
		return fmt.Errorf("%w: the ledger could not record the execution, so it did not run (%v); "+
			"check that the data directory's disk has space and is writable", sandbox.ErrNotReady, err)
	}
	return nil
}

// run runs x's program in its slot, under the daemon's deadline, answering its agent.* calls
// and keeping its output files. An error (wrapping ErrNotReady) means it never started: its
// record is discarded.
func (s *Service) run(ctx context.Context, x *execution, emit func(sandbox.Event)) (sandbox.Result, error) {
	started := time.Now()
	runCtx, cancelRun := context.WithTimeout(ctx, time.Duration(x.spec.TimeoutMS)*time.Millisecond+s.cfg.Grace+x.grace)
	defer cancelRun()
	line := &calls{s: s, scope: sandbox.CallScope{Agent: x.agent, ExecutionID: x.spec.ID}, emit: emit, one: make(chan struct{}, 1),
		slot: x.slot, session: x.box != nil}
	x.spec.Calls, x.spec.CallBytes = line.handle, s.cfg.MaxCallBytes
	// The files are stored even when the caller has gone: the run's record lists them.
	x.files.ctx = context.WithoutCancel(ctx)
	var gate sandbox.EgressRun
	if s.net != nil {
		gate = s.net.ForRun(x.narrow, x.req.NetworkAllow)
		x.spec.Egress = gate
		if x.secrets != nil {
			x.secrets.Attach(gate)
		}
	}
	var (
		res sandbox.Result
		err error
	)
	if x.box != nil {
		res, err = x.box.Run(runCtx, x.spec, x.files.wrap(emit))
	} else {
		res, err = s.rt.Run(runCtx, x.slot, x.spec, x.files.wrap(emit))
	}
	if gate != nil {
		// No connection outlives its run; the record lists every one it asked for.
		gate.Close()
		res.Egress, res.EgressOmitted = gate.Connections()
		if x.secrets != nil {
			res.SecretUses, res.SecretUsesOmitted = x.secrets.Take()
			for _, u := range res.SecretUses {
				s.log.Info("a run used a secret's placeholder", "execution", x.spec.ID, "secret", u.Secret, "host", u.Host, "added", u.Added, "why", u.Why, "status", u.Status)
			}
		}
	}
	audit, logs := line.end()
	switch {
	case err != nil && errors.Is(err, sandbox.ErrNotReady) && ctx.Err() == nil:
		if !x.unrecorded {
			s.discard(ctx, x.spec.ID)
		}
		return sandbox.Result{}, err
	case err != nil, ctx.Err() != nil && res.Outcome == sandbox.OutcomeKilled:
		// Also the runtime's result for a run it killed because ctx ended: the reason says who
		// ended it. (A run that ended by itself meanwhile keeps its own result.)
		res = s.systemFailure(ctx, runCtx, res, started, err)
	}
	res.Logs, x.audit = logs, audit
	return x.files.apply(res), nil
}

// discard removes the record of a run that did not start after all.
func (s *Service) discard(ctx context.Context, id string) {
	if s.rec == nil {
		return
	}
	if err := s.rec.Discard(context.WithoutCancel(ctx), id); err != nil {
		s.log.Error("the ledger could not discard a run that did not start", "id", id, "error", err)
	}
}

// finish completes a result with what the Service knows of x, checks OUTPUT, and records it.
// Its StartedAt is x.accepted, when the execution took its slot: an install before the program
// does not move it (InstallMS says how long that took).
func (s *Service) finish(ctx context.Context, x *execution, res sandbox.Result) sandbox.Result {
	res.ID, res.Agent, res.TimeoutMS, res.Origin, res.StartedAt = x.spec.ID, x.agent, x.spec.TimeoutMS, x.origin, x.accepted
	res.SessionID = x.session
	res.Dependencies, res.InstallMS, res.Calls = x.deps.Dependencies, x.installMS, x.audit
	if len(x.installEgress) > 0 {
		res.Egress = append(x.installEgress, res.Egress...)
	}
	if res.Output == nil {
		res.Output = json.RawMessage("null")
	}
	res = checkOutput(x.req, res)
	if !x.unrecorded {
		s.record(ctx, res)
	}
	s.log.Info("execution finished", "id", res.ID, "agent", x.agent, "slot", x.slot, "session", x.session,
		"outcome", res.Outcome, "exit_code", res.ExitCode, "duration_ms", res.DurationMS, "install_ms", x.installMS)
	return res
}

// checkOutput holds a run that ended ok to req's check of OUTPUT, and sets Success.
func checkOutput(req sandbox.Request, res sandbox.Result) sandbox.Result {
	if res.Outcome == sandbox.OutcomeOK && req.CheckOutput != nil {
		if err := req.CheckOutput(res.Output); err != nil {
			res.Outcome, res.Reason = sandbox.OutcomeOutputInvalid, err.Error()
		}
	}
	res.Success = res.Outcome == sandbox.OutcomeOK
	return res
}

// record keeps res in the ledger; when the ledger fails, it retries in the background.
func (s *Service) record(ctx context.Context, res sandbox.Result) {
	if s.rec == nil {
		return
	}
	// The run is over whatever the caller does now: record it even if ctx has ended.
	if err := s.rec.Finish(context.WithoutCancel(ctx), res); err != nil {
		s.log.Error("the ledger could not record an execution's result; retrying", "id", res.ID, "error", err)
		go s.retryFinish(res)
	}
}

// Install makes the requirements importable ahead of any run (pre-installing them), and
// returns each one's status; progress, when not nil, receives them as they are decided.
// Errors: a *FieldError naming the bad requirement, or the runtime's (see Installer).
func (s *Service) Install(ctx context.Context, reqs []string, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	if len(reqs) == 0 {
		return sandbox.Installed{}, &sandbox.FieldError{Field: "requirements", Message: `is empty: give at least one requirement such as "tinypkg==1.0"`}
	}
	if _, err := requirement.ParseList(reqs, s.cfg.MaxDependencies); err != nil {
		return sandbox.Installed{}, &sandbox.FieldError{Field: "requirements", Message: err.Error()}
	}
	if s.base.Err() != nil {
		return sandbox.Installed{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, context.Cause(s.base))
	}
	var emit func(sandbox.Event)
	if progress != nil {
		emit = func(e sandbox.Event) { progress(*e.Dependency) }
	}
	// Installs take a slot like runs: they are bounded by the slots and the queue.
	slot, err := s.slots.acquire(ctx, "", s.cfg.InstallTimeout)
	if err != nil {
		return sandbox.Installed{}, err
	}
	defer s.slots.release(slot, "")
	out, _, err := s.install(ctx, slot, reqs, emit)
	return out, err
}

// install makes the requirements importable through the runtime, in slot's sandbox, streaming
// each status to emit as an event of stream "dependency".
//
// Under network "allowlist" it also returns the install's outbound connections (pip's, to the
// package index), marked Install.
func (s *Service) install(ctx context.Context, slot int, reqs []string, emit func(sandbox.Event)) (sandbox.Installed, []sandbox.EgressConnection, error) {
	inst, ok := s.rt.(sandbox.Installer)
	if !ok {
		return sandbox.Installed{}, nil, &sandbox.FieldError{Field: "dependencies", Message: "this sandbox cannot install packages; send the request without dependencies"}
	}
	return s.InstallWith(ctx, reqs, emit, func(ctx context.Context, ireq sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
		return inst.Install(ctx, slot, ireq, progress)
	})
}

// InstallWith installs reqs (validated already) with install, a slot's or a session's: the
// request carries the daemon's install timeout and network policy, and under network
// "allowlist" the egress gate that lets pip reach the package index. It returns the
// install's outbound connections, marked Install, with what they explain added to the
// failed dependencies' errors.
func (s *Service) InstallWith(ctx context.Context, reqs []string, emit func(sandbox.Event),
	install func(context.Context, sandbox.InstallRequest, func(sandbox.DependencyStatus)) (sandbox.Installed, error)) (sandbox.Installed, []sandbox.EgressConnection, error) {
	parsed, _ := requirement.ParseList(reqs, s.cfg.MaxDependencies) // validated already
	canonical := make([]string, len(parsed))
	for i, r := range parsed {
		canonical[i] = r.String()
	}
	var progress func(sandbox.DependencyStatus)
	if emit != nil {
		progress = func(d sandbox.DependencyStatus) {
			d = markSkipped(d)
			emit(sandbox.Event{Stream: sandbox.StreamDependency, Dependency: &d})
		}
	}
	ireq := sandbox.InstallRequest{Requirements: canonical, Timeout: s.cfg.InstallTimeout, Offline: s.cfg.Network == "none"}
	var gate sandbox.EgressRun
	if s.net != nil {
		gate = s.net.ForInstall()
		ireq.Egress = gate
	}
	out, err := install(ctx, ireq, progress)
	for i, d := range out.Dependencies {
		out.Dependencies[i] = markSkipped(d)
	}
	var conns []sandbox.EgressConnection
	if gate != nil {
		gate.Close()
		conns, _ = gate.Connections()
		for i := range conns {
			conns[i].Install = true
		}
		explainEgress(&out, conns)
	}
	return out, conns, err
}

// explainEgress adds to each failed dependency's error what the egress proxy refused or could
// not reach during the install: pip itself sees only a 403 or 502 answer, and often says no
// more than that no version was found.
func explainEgress(out *sandbox.Installed, conns []sandbox.EgressConnection) {
	var failed, refused []string
	seen := map[string]bool{}
	for _, c := range conns {
		if c.Reason == "" || seen[c.Reason] || len(failed)+len(refused) == 3 {
			continue
		}
		seen[c.Reason] = true
		line := fmt.Sprintf("%s:%d: %s", c.Host, c.Port, c.Reason)
		if c.Allowed {
			failed = append(failed, line)
		} else {
			refused = append(refused, line)
		}
	}
	var note string
	if len(failed) > 0 {
		note += "\nthe package index could not be reached through the sandbox's egress proxy (network \"allowlist\"; check index_url): " +
			strings.Join(failed, "; ")
	}
	if len(refused) > 0 {
		note += "\nthe sandbox's egress proxy refused pip's connections (network \"allowlist\": installs reach the hosts of index_url " +
			"and extra_index_urls): " + strings.Join(refused, "; ")
	}
	if note == "" {
		return
	}
	for i, d := range out.Dependencies {
		if d.Status == sandbox.DependencyFailed {
			out.Dependencies[i].Error += note
		}
	}
}

// finishRetries and finishRetryEvery bound retrying a result the ledger could not record
// (a full or read-only disk): about ten minutes.
const (
	finishRetries    = 120
	finishRetryEvery = 5 * time.Second
)

// retryFinish records res once the ledger can take it, giving up after finishRetries or when
// the Service is interrupted (the next start then finalises the record as interrupted).
func (s *Service) retryFinish(res sandbox.Result) {
	for range finishRetries {
		select {
		case <-s.base.Done():
			return
		case <-time.After(finishRetryEvery):
		}
		if err := s.rec.Finish(context.Background(), res); err == nil {
			s.log.Info("the ledger recorded an execution's result after all", "id", res.ID)
			return
		}
	}
	s.log.Error("the ledger never recorded an execution's result; it will read interrupted", "id", res.ID)
}

// dependencyError is the result of a run whose dependencies could not all be installed: the
// code never ran.
func (s *Service) dependencyError(deps sandbox.Installed) sandbox.Result {
	failed := deps.Failed()
	first := failed[0]
	what := "could not be installed"
	if conflicts(first) {
		what = fmt.Sprintf("is installed (version %s) but conflicts with another requirement", first.Version)
	}
	reason := fmt.Sprintf("dependency %s %s, so the code did not run: %s", first.Requirement, what, first.Error)
	if len(failed) > 1 {
		others := make([]string, len(failed)-1)
		for i, d := range failed[1:] {
			others[i] = d.Requirement
		}
		reason += fmt.Sprintf(" (failed too: %s)", strings.Join(others, ", "))
	}
	return sandbox.Result{Outcome: sandbox.OutcomeDependencyError, ExitCode: -1, Reason: reason}
}

// systemFailure turns a runtime error into a Result, keeping whatever output the runtime had.
func (s *Service) systemFailure(ctx, runCtx context.Context, res sandbox.Result, started time.Time, err error) sandbox.Result {
	switch {
	case errors.Is(context.Cause(ctx), ErrInterrupted):
		res.Outcome = sandbox.OutcomeSandboxError
		res.Reason = ErrInterrupted.Error() + "; the run was stopped"
	case ctx.Err() != nil:
		res.Outcome = sandbox.OutcomeKilled
		res.Reason = "cancelled: the request was cancelled by its client before the run ended"
	case runCtx.Err() != nil:
		res.Outcome = sandbox.OutcomeSandboxError
		res.Reason = fmt.Sprintf("the executor did not report the run's end within %s of its timeout", s.cfg.Grace)
	default:
		res.Outcome = sandbox.OutcomeSandboxError
		res.Reason = err.Error()
	}
	if res.ExitCode == 0 {
		res.ExitCode = -1
	}
	if res.StartedAt.IsZero() {
		res.StartedAt = started.UTC()
	}
	if res.DurationMS == 0 {
		res.DurationMS = time.Since(started).Milliseconds()
	}
	if err != nil {
		s.log.Warn("execution failed in the system", "error", err)
	}
	return res
}

// Settled waits until every slot released so far has settled (or the Service was interrupted).
func (s *Service) Settled() { s.slots.settled() }
