package session

import (
	"context"
	"io"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// idleRuntime is the Service's runtime in these tests: sessions run in their own boxes, never
// in a slot.
type idleRuntime struct{}

func (idleRuntime) Run(context.Context, int, sandbox.Spec, func(sandbox.Event)) (sandbox.Result, error) {
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

func (idleRuntime) Ready(context.Context) error { return nil }

func newService(hooks engine.Hooks) *engine.Service {
	return engine.NewService(idleRuntime{}, hooks, engine.DefaultConfig(), nil)
}

// keeper calls a Registry by agent and session ID, as the tests of this package were first
// written: each call looks the session up (Get) and calls its handle, as a door does.
type keeper struct{ *Registry }

func newKeeper(svc *engine.Service, opener sandbox.SessionOpener, ledger sandbox.SessionLedger, cfg Config) *keeper {
	return &keeper{New(svc, opener, ledger, cfg, nil)}
}

func (k *keeper) Create(ctx context.Context, req sandbox.SessionRequest) (sandbox.SessionInfo, error) {
	s, err := k.Registry.Create(ctx, req)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return s.Info(), nil
}

func (k *keeper) Get(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	return k.Info(ctx, agent, id)
}

// each looks agent's session id up and calls f with it.
func each[T any](ctx context.Context, k *keeper, agent, id string, f func(*Session) (T, error)) (T, error) {
	s, err := k.Registry.Get(ctx, agent, id)
	if err != nil {
		var zero T
		return zero, err
	}
	return f(s)
}

func (k *keeper) Execute(ctx context.Context, id string, req sandbox.Request, wait bool, emit func(sandbox.Event)) (sandbox.Result, error) {
	return each(ctx, k, req.Agent, id, func(s *Session) (sandbox.Result, error) { return s.Execute(ctx, req, wait, emit) })
}

func (k *keeper) Close(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	info, err := each(ctx, k, agent, id, func(s *Session) (sandbox.SessionInfo, error) { return s.Close(ctx) })
	if ended, ok := err.(*sandbox.SessionEndedError); ok {
		return ended.Info, nil
	}
	return info, err
}

func (k *keeper) Pause(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.SessionInfo, error) { return s.Pause(ctx) })
}

func (k *keeper) Resume(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.SessionInfo, error) { return s.Resume(ctx) })
}

func (k *keeper) Hibernate(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.SessionInfo, error) { return s.Hibernate(ctx) })
}

func (k *keeper) Fork(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.SessionInfo, error) {
		fork, err := s.Fork(ctx)
		if err != nil {
			return sandbox.SessionInfo{}, err
		}
		return fork.Info(), nil
	})
}

func (k *keeper) Command(ctx context.Context, agent, id string, req CommandRequest, emit func(CommandEvent)) (CommandResult, error) {
	return each(ctx, k, agent, id, func(s *Session) (CommandResult, error) { return s.Command(ctx, req, emit) })
}

func (k *keeper) ReadFile(ctx context.Context, agent, id, p string, offset, length int64) (sandbox.FileContent, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.FileContent, error) { return s.ReadFile(ctx, p, offset, length) })
}

func (k *keeper) WriteFile(ctx context.Context, agent, id, p string, r io.Reader, parents bool) (sandbox.FileEntry, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.FileEntry, error) { return s.WriteFile(ctx, p, r, parents) })
}

func (k *keeper) LookFile(ctx context.Context, agent, id, p string, offset, length int64) (sandbox.FileContent, error) {
	return each(ctx, k, agent, id, func(s *Session) (sandbox.FileContent, error) { return s.LookFile(ctx, p, offset, length) })
}

func (k *keeper) CreateWarm(ctx context.Context, req sandbox.SessionRequest, code string) (sandbox.SessionInfo, error) {
	s, err := k.Registry.createWarm(ctx, req, code, nil)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return s.Info(), nil
}

// Adopt hands warm session id to agent with the registry's default limits.
func (k *keeper) Adopt(ctx context.Context, id, agent string) (sandbox.SessionInfo, error) {
	k.mu.Lock()
	s := k.live[id]
	k.mu.Unlock()
	if s == nil {
		return sandbox.SessionInfo{}, sandbox.ErrSessionNotFound
	}
	s, err := k.Registry.adopt(ctx, s, agent, sandbox.SessionRequest{}, nil, nil, k.cfg.IdleTimeout, k.cfg.MaxLifetime)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return s.Info(), nil
}

func (k *keeper) CloseWarm(ctx context.Context, id string) (sandbox.SessionInfo, error) {
	return k.Registry.closeWarm(ctx, id)
}
