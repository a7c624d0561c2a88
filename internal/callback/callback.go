// Package callback answers the agent.* calls that sandboxed code makes back into the host.
//
// A Handler has one method per call. Dispatch decodes a call's arguments strictly, checks
// them, and hands them to a Handler with the run's scope (its agent and execution), so a
// handler never sees another agent's call. Two handlers: Store, the built-in knowledge store
// (package store's tables, on SQLite or PostgreSQL), and Webhook, which POSTs each call to the host
// application.
package callback

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The arguments of each call, as the Python side sends them.
type (
	SearchMemoryArgs struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	GetFactsArgs struct {
		Subject   *string `json:"subject"`
		Predicate *string `json:"predicate"`
		Limit     int     `json:"limit"`
	}
	QueryGraphArgs struct {
		Start    *string `json:"start"`
		Relation *string `json:"relation"`
		Depth    int     `json:"depth"`
		Limit    int     `json:"limit"`
	}
	GetDocumentsArgs struct {
		Query *string  `json:"query"`
		IDs   []string `json:"ids"`
		Limit int      `json:"limit"`
	}
	StoreResultArgs struct {
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	LogArgs struct {
		Message string `json:"message"`
		Level   string `json:"level"`
	}
)

// Handler answers each call for the run in scope. Return values are encoded as JSON; an error
// becomes agent.Error in Python, with its text.
type Handler interface {
	SearchMemory(ctx context.Context, scope sandbox.CallScope, a SearchMemoryArgs) ([]store.Memory, error)
	GetFacts(ctx context.Context, scope sandbox.CallScope, a GetFactsArgs) ([]store.Fact, error)
	QueryGraph(ctx context.Context, scope sandbox.CallScope, a QueryGraphArgs) (store.Graph, error)
	GetDocuments(ctx context.Context, scope sandbox.CallScope, a GetDocumentsArgs) ([]store.Document, error)
	StoreResult(ctx context.Context, scope sandbox.CallScope, a StoreResultArgs) (store.StoredResult, error)
	Log(ctx context.Context, scope sandbox.CallScope, a LogArgs) error
}

// RawHandler is a Handler whose answers are JSON made elsewhere (Webhook: the host
// application's). Dispatch passes such an answer to the program as it was sent, once its shape
// is checked, instead of decoding it into the Handler's Go types and encoding it again, which
// would drop the fields those types lack and fill the ones the answer lacks with zeros.
type RawHandler interface {
	Handler
	// Answer answers method (one of sandbox.CallMethods but log) with args, already checked.
	Answer(ctx context.Context, scope sandbox.CallScope, method string, args any) (json.RawMessage, error)
}

// Dispatch turns a Handler into the sandbox's Callbacks.
type Dispatch struct{ Handler Handler }

// ask answers a checked call: from a RawHandler as it answers, else from typed.
func ask[A, R any](ctx context.Context, d Dispatch, scope sandbox.CallScope, method string, a A,
	typed func(context.Context, sandbox.CallScope, A) (R, error)) (any, error) {
	if raw, ok := d.Handler.(RawHandler); ok {
		return raw.Answer(ctx, scope, method, a)
	}
	return typed(ctx, scope, a)
}

var _ sandbox.Callbacks = Dispatch{}

// Call decodes call's arguments for its method, checks them and asks the handler.
func (d Dispatch) Call(ctx context.Context, scope sandbox.CallScope, call sandbox.Call) (json.RawMessage, error) {
	var (
		value any
		err   error
	)
	switch call.Method {
	case "search_memory":
		var a SearchMemoryArgs
		if err = decode(call, &a); err == nil {
			if err = limit(call.Method, a.Limit); err == nil {
				value, err = ask(ctx, d, scope, call.Method, a, d.Handler.SearchMemory)
			}
		}
	case "get_facts":
		var a GetFactsArgs
		if err = decode(call, &a); err == nil {
			if err = limit(call.Method, a.Limit); err == nil {
				value, err = ask(ctx, d, scope, call.Method, a, d.Handler.GetFacts)
			}
		}
	case "query_graph":
		var a QueryGraphArgs
		if err = decode(call, &a); err == nil {
			if err = limit(call.Method, a.Limit); err == nil {
				if a.Depth < 1 || a.Depth > 5 {
					err = fmt.Errorf("query_graph: depth is %d; allowed range is 1 to 5", a.Depth)
				} else {
					value, err = ask(ctx, d, scope, call.Method, a, d.Handler.QueryGraph)
				}
			}
		}
	case "get_documents":
		var a GetDocumentsArgs
		if err = decode(call, &a); err == nil {
			if err = limit(call.Method, a.Limit); err == nil {
				value, err = ask(ctx, d, scope, call.Method, a, d.Handler.GetDocuments)
			}
		}
	case "store_result":
		var a StoreResultArgs
		if err = decode(call, &a); err == nil {
			if n := utf8.RuneCountInString(a.Key); n == 0 || n > 200 {
				err = fmt.Errorf("store_result: key is %d characters; it must be 1 to 200", n)
			} else {
				value, err = ask(ctx, d, scope, call.Method, a, d.Handler.StoreResult)
			}
		}
	case "log":
		var a LogArgs
		if err = decode(call, &a); err == nil {
			if slices.Contains(sandbox.LogLevels, a.Level) {
				err = d.Handler.Log(ctx, scope, a)
			} else {
				err = fmt.Errorf("log: level %q is not debug, info, warning or error", a.Level)
			}
		}
	default:
		err = fmt.Errorf("agent has no method %q", call.Method)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(value)
}

// decode reads call's arguments into v, refusing unknown fields.
func decode(call sandbox.Call, v any) error {
	dec := json.NewDecoder(bytes.NewReader(call.Args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: the arguments do not fit the method: %v", call.Method, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%s: the arguments must be one JSON object", call.Method)
	}
	return nil
}

func limit(method string, n int) error {
	if n < 1 || n > 1000 {
		return fmt.Errorf("%s: limit is %d; allowed range is 1 to 1000", method, n)
	}
	return nil
}

// Store answers calls from the built-in knowledge store.
type Store struct {
	DB *store.Store
	// AnswerBytes is the cap on an answer's JSON (max_call_bytes; 0: none). query_graph bounds
	// its walk by it (see store.Neighbourhood).
	AnswerBytes int
}

var _ Handler = Store{}

func (s Store) SearchMemory(ctx context.Context, scope sandbox.CallScope, a SearchMemoryArgs) ([]store.Memory, error) {
	return s.DB.SearchMemories(ctx, scope.Agent, a.Query, a.Limit)
}

func (s Store) GetFacts(ctx context.Context, scope sandbox.CallScope, a GetFactsArgs) ([]store.Fact, error) {
	return s.DB.QueryFacts(ctx, scope.Agent, deref(a.Subject), deref(a.Predicate), a.Limit)
}

func (s Store) QueryGraph(ctx context.Context, scope sandbox.CallScope, a QueryGraphArgs) (store.Graph, error) {
	return s.DB.Neighbourhood(ctx, store.GraphQuery{Agent: scope.Agent, Start: deref(a.Start), Relation: deref(a.Relation),
		Depth: a.Depth, Limit: a.Limit, AnswerBytes: s.AnswerBytes})
}

func (s Store) GetDocuments(ctx context.Context, scope sandbox.CallScope, a GetDocumentsArgs) ([]store.Document, error) {
	return s.DB.FindDocuments(ctx, scope.Agent, deref(a.Query), a.IDs, a.Limit)
}

func (s Store) StoreResult(ctx context.Context, scope sandbox.CallScope, a StoreResultArgs) (store.StoredResult, error) {
	return s.DB.StoreResult(ctx, scope.Agent, a.Key, a.Value, scope.ExecutionID)
}

// Log accepts the line: the sandbox keeps it with the execution (in the ledger), whichever
// handler answers the calls.
func (s Store) Log(context.Context, sandbox.CallScope, LogArgs) error { return nil }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
