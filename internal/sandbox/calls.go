package sandbox

import (
	"context"
	"encoding/json"
	"errors"
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

// CallRecord is the audit entry of one call, kept with the execution.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type CallRecord struct {
	Method        string `json:"method"`
	DurationMS    int64  `json:"duration_ms"`
	RequestBytes  int    `json:"request_bytes"`
	ResponseBytes int    `json:"response_bytes"`
	OK            bool   `json:"ok"`
	Error         string `json:"error,omitempty"`
}

// LogLine is one agent.log line of a run.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type LogLine struct {
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
}

// The log limits of one run: a message's size, and all messages together, in bytes.
const (
	MaxLogMessage = 64 << 10
	MaxLogBytes   = 1 << 20
)

// LogLevels are the levels of agent.log lines.
var LogLevels = []string{"debug", "info", "warning", "error"}

// The call methods.
var CallMethods = []string{"search_memory", "get_facts", "query_graph", "get_documents", "store_result", "log"}

// ErrRunEnded is the answer to a call that arrives after its run ended.
var ErrRunEnded = errors.New("the run has ended; calls are only answered while it runs")
