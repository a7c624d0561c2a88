package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Call is one agent.* call a program made back to the host.
type Call struct {
	// Method is the call's name: search_memory, get_facts, query_graph, get_documents,
	// store_result or log.
	Method string `json:"method"`
	// Args are the call's arguments as a JSON object.
	Args json.RawMessage `json:"args"`
}

// CallScope says whose a call is: the agent the run belongs to and the execution.
type CallScope struct {
	Agent       string `json:"agent"`
	ExecutionID string `json:"execution_id"`
}

// Callbacks answer programs' agent.* calls (the knowledge store, or a webhook). The value is
// the call's JSON return value; an error becomes agent.Error in Python, with its text.
type Callbacks interface {
	Call(ctx context.Context, scope CallScope, call Call) (json.RawMessage, error)
}

// CallRecord is the audit entry of one call, kept with the execution. The JSON field names
// are the public API.
type CallRecord struct {
	Method        string `json:"method"`
	DurationMS    int64  `json:"duration_ms"`
	RequestBytes  int    `json:"request_bytes"`
	ResponseBytes int    `json:"response_bytes"`
	OK            bool   `json:"ok"`
	Error         string `json:"error,omitempty"`
}

// The call methods.
var CallMethods = []string{"search_memory", "get_facts", "query_graph", "get_documents", "store_result", "log"}

// ErrRunEnded is the answer to a call that arrives after its run ended.
var ErrRunEnded = errors.New("the run has ended; calls are only answered while it runs")

// calls is one run's call line: its scope, caps and audit.
type calls struct {
	s     *Service
	scope CallScope
	emit  func(Event)

	mu    sync.Mutex
	ended bool
	audit []CallRecord
	made  int
}

// handle answers one call of the run, enforcing the caps and recording it.
func (c *calls) handle(ctx context.Context, call Call) (json.RawMessage, error) {
	began := time.Now()
	rec := CallRecord{Method: call.Method, RequestBytes: len(call.Args)}
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

func (c *calls) answer(ctx context.Context, call Call) (json.RawMessage, error) {
	cfg := c.s.cfg
	c.mu.Lock()
	switch {
	case c.ended:
		c.mu.Unlock()
		return nil, ErrRunEnded
	case c.made >= cfg.MaxCalls:
		c.mu.Unlock()
		return nil, fmt.Errorf("the run has made %d agent calls, the limit (max_calls); no more are answered", cfg.MaxCalls)
	}
	c.made++
	c.mu.Unlock()

	if len(call.Args) > cfg.MaxCallBytes {
		return nil, fmt.Errorf("the call's arguments are %d bytes of JSON; the limit is %d bytes", len(call.Args), cfg.MaxCallBytes)
	}
	known := false
	for _, m := range CallMethods {
		known = known || m == call.Method
	}
	if !known {
		return nil, fmt.Errorf("agent has no method %q; the methods are %v", call.Method, CallMethods)
	}
	if c.s.cb == nil {
		return nil, errors.New("this sandpit daemon has no callback handler configured")
	}
	if call.Method == "log" {
		c.log(call.Args)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()
	value, err := c.s.cb.Call(ctx, c.scope, call)
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

// log streams an agent.log line as a "log" event and writes it to the daemon's log.
func (c *calls) log(args json.RawMessage) {
	var l struct {
		Message string `json:"message"`
		Level   string `json:"level"`
	}
	if json.Unmarshal(args, &l) != nil {
		return
	}
	c.s.log.Info("agent log", "id", c.scope.ExecutionID, "agent", c.scope.Agent, "level", l.Level, "message", l.Message)
	if c.emit != nil {
		c.emit(Event{Stream: "log", Data: l.Message, Level: l.Level})
	}
}

// end refuses later calls and returns the audit.
func (c *calls) end() []CallRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	return c.audit
}
