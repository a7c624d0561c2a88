// Package httpapitest gives tests of the REST API and its client a fake httpapi.Executor.
package httpapitest

import (
	"context"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Executor records the requests it gets and answers each with Fn.
type Executor struct {
	Cfg      engine.Config
	ReadyErr error
	Fn       func(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)

	mu    sync.Mutex
	calls []sandbox.Request
}

// Execute records req and returns Fn's answer.
func (f *Executor) Execute(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	return f.Fn(ctx, req, emit)
}

// Ready returns ReadyErr.
func (f *Executor) Ready(context.Context) error { return f.ReadyErr }

// Config returns Cfg.
func (f *Executor) Config() engine.Config { return f.Cfg }

// Requests returns the requests received so far.
func (f *Executor) Requests() []sandbox.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sandbox.Request(nil), f.calls...)
}

// Fixed returns an Fn that always answers res, err.
func Fixed(res sandbox.Result, err error) func(context.Context, sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) {
	return func(context.Context, sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) { return res, err }
}
