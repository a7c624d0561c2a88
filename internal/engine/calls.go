package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// calls is one run's call line: its scope, caps and audit.
type calls struct {
	s     *Service
	scope sandbox.CallScope
	emit  func(sandbox.Event)
	// slot is the run's slot (where %pip installs); session: the run is a session's call
	slot    int
	session bool
	// one is held while a call is answered: a run's calls are answered one at a time, even
	// when a program writes them to the control line without waiting (the Python side waits),
	// so that a run keeps at most one of the daemon's goroutines busy with its calls.
	one chan struct{}

	mu       sync.Mutex
	ended    bool
	audit    []sandbox.CallRecord
	made     int
	logs     []sandbox.LogLine
	logBytes int
}

// maxLoggedLines is how many of a run's agent.log lines the daemon's own log repeats (each cut
// at 1 KiB); the rest are in the run's record only, so that runs cannot fill the daemon's log.
const maxLoggedLines = 20

// handle answers one call of the run, enforcing the caps and recording it.
func (c *calls) handle(ctx context.Context, call sandbox.Call) (json.RawMessage, error) {
	began := time.Now()
	rec := sandbox.CallRecord{Method: call.Method, RequestBytes: len(call.Args)}
	value, err := c.answer(ctx, call)
	rec.DurationMS, rec.ResponseBytes, rec.OK = time.Since(began).Milliseconds(), len(value), err == nil
	if err != nil {
		rec.Error = err.Error()
	}
	c.mu.Lock()
	if !c.ended {
		c.audit = append(c.audit, rec)
	}
	c.mu.Unlock()
	return value, err
}

func (c *calls) answer(ctx context.Context, call sandbox.Call) (json.RawMessage, error) {
	cfg := c.s.cfg
	c.mu.Lock()
	switch {
	case c.ended:
		c.mu.Unlock()
		return nil, sandbox.ErrRunEnded
	case c.made >= cfg.MaxCalls:
		c.mu.Unlock()
		return nil, fmt.Errorf("the run has made %d agent calls, the limit (max_calls); no more are answered", cfg.MaxCalls)
	}
	c.made++
	c.mu.Unlock()

	if len(call.Args) > cfg.MaxCallBytes {
		return nil, fmt.Errorf("the call's arguments are %d bytes of JSON; the limit is %d bytes", len(call.Args), cfg.MaxCallBytes)
	}
	if call.Method == pipInstall {
		return c.pip(ctx, call.Args)
	}
	if !slices.Contains(sandbox.CallMethods, call.Method) {
		return nil, fmt.Errorf("agent has no method %q; the methods are %v", call.Method, sandbox.CallMethods)
	}
	if c.s.cb == nil {
		return nil, errors.New("this sandpit daemon has no callback handler configured")
	}
	var line *sandbox.LogLine
	if call.Method == "log" {
		var err error
		if line, err = c.logLine(call.Args); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()
	select {
	case c.one <- struct{}{}:
		defer func() { <-c.one }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%s waited its whole call timeout of %s for the run's earlier calls: a run's calls are answered one at a time", call.Method, cfg.CallTimeout)
	}
	value, err := c.s.cb.Call(ctx, c.scope, call)
	if err == nil && line != nil {
		c.keep(*line)
	}
	switch {
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		return nil, fmt.Errorf("the host did not answer %s within the call timeout of %s", call.Method, cfg.CallTimeout)
	case err != nil:
		return nil, err
	case len(value) > cfg.MaxCallBytes:
		return nil, fmt.Errorf("the answer to %s is %d bytes; the limit is %d bytes: ask for less (a smaller limit)", call.Method, len(value), cfg.MaxCallBytes)
	}
	if len(value) == 0 {
		value = json.RawMessage("null")
	}
	return value, nil
}

// pipInstall is the call the notebook layer's %pip install makes (not an agent.* method).
const pipInstall = "pip_install"

// pip answers %pip install: the requirements go through the dependency path of a request's
// dependencies (the same validation, package index, trust rules, cache and install timeout,
// in the run's slot, streamed as "dependency" events), and the answer is the directories to
// put on the program's sys.path. The install's time counts to the run's timeout. A session's
// call is refused: a session's packages are given when it is created.
func (c *calls) pip(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var a struct {
		Requirements []string `json:"requirements"`
	}
	if err := json.Unmarshal(args, &a); err != nil || len(a.Requirements) == 0 {
		return nil, errors.New("%pip install: give one or more requirements, e.g. %pip install tinypkg==1.0")
	}
	if c.session {
		return nil, errors.New("%pip install does not work in a session: give the packages in dependencies when you create the session")
	}
	if _, err := requirement.ParseList(a.Requirements, c.s.cfg.MaxDependencies); err != nil {
		return nil, fmt.Errorf("%%pip install: %v", err)
	}
	// A requirement that fails is the program's exception (below), not a dependency event
	// of its own: the user heard of it twice ("could not install", then the traceback).
	emit := c.emit
	if emit != nil {
		emit = func(e sandbox.Event) {
			if e.Dependency == nil || e.Dependency.Status != sandbox.DependencyFailed {
				c.emit(e)
			}
		}
	}
	out, _, err := c.s.install(ctx, c.slot, a.Requirements, emit)
	if err != nil {
		return nil, fmt.Errorf("%%pip install: %v", err)
	}
	if failed := out.Failed(); len(failed) > 0 {
		var msgs []string
		for _, d := range failed {
			msgs = append(msgs, d.Requirement+": "+d.Error)
		}
		return nil, fmt.Errorf("%%pip install failed: %s", strings.Join(msgs, "; "))
	}
	return json.Marshal(out.Paths)
}

// logLine checks an agent.log call against the run's log limits and reserves its budget.
func (c *calls) logLine(args json.RawMessage) (*sandbox.LogLine, error) {
	var l sandbox.LogLine
	if err := json.Unmarshal(args, &l); err != nil {
		return nil, fmt.Errorf("log: the arguments must be {\"message\", \"level\"}: %v", err)
	}
	if !slices.Contains(sandbox.LogLevels, l.Level) {
		return nil, fmt.Errorf("log: level %q is not debug, info, warning or error", l.Level)
	}
	if len(l.Message) > sandbox.MaxLogMessage {
		return nil, fmt.Errorf("log: the message is %d bytes; the limit is %d bytes: log less, or return data through OUTPUT", len(l.Message), sandbox.MaxLogMessage)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logBytes+len(l.Message) > sandbox.MaxLogBytes {
		return nil, fmt.Errorf("log: the run has logged %d bytes; the limit is %d bytes per run: log less, or return data through OUTPUT", c.logBytes, sandbox.MaxLogBytes)
	}
	c.logBytes += len(l.Message)
	l.CreatedAt = time.Now().UTC()
	return &l, nil
}

// keep records a log line with the run, streams it as a "log" event and writes it (cut short)
// to the daemon's log.
func (c *calls) keep(l sandbox.LogLine) {
	c.mu.Lock()
	ended := c.ended
	if !ended {
		c.logs = append(c.logs, l)
	}
	n := len(c.logs)
	c.mu.Unlock()
	if ended {
		return
	}
	msg := l.Message
	if len(msg) > 1024 {
		msg = strings.ToValidUTF8(msg[:1024], "") + "…"
	}
	switch {
	case n <= maxLoggedLines:
		c.s.log.Info("agent log", "id", c.scope.ExecutionID, "agent", c.scope.Agent, "level", l.Level, "message", msg)
	case n == maxLoggedLines+1:
		c.s.log.Info("agent log: this run's further lines are in its record only", "id", c.scope.ExecutionID, "agent", c.scope.Agent, "logged", maxLoggedLines)
	}
	if c.emit != nil {
		c.emit(sandbox.Event{Stream: sandbox.StreamLog, Data: l.Message, Level: l.Level})
	}
}

// end refuses later calls and returns the audit and the log lines.
func (c *calls) end() ([]sandbox.CallRecord, []sandbox.LogLine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	return c.audit, c.logs
}
