package apitype

// The error codes of ErrorDetail.Code, each with its one HTTP status. A code the client does
// not know is still an error of its status.
const (
	CodeInvalidRequest   = "invalid_request"        // 400: the request is malformed or a field is out of range
	CodeInvalidInput     = "invalid_input"          // 400: the input breaks the saved code's input schema (see Violations)
	CodeUnauthorized     = "unauthorized"           // 401: no or a wrong bearer token
	CodeForbidden        = "forbidden"              // 403: the request may not do this
	CodeNotFound         = "not_found"              // 404: no such route or resource
	CodeMethodNotAllowed = "method_not_allowed"     // 405: the route exists for other methods (see Allow)
	CodeConflict         = "conflict"               // 409: the resource exists, changed, or is in use
	CodeGone             = "gone"                   // 410: the resource existed but its bytes were evicted
	CodeTooLarge         = "too_large"              // 413: the body or a field is over its limit
	CodeQuotaExceeded    = "quota_exceeded"         // 413: an agent's stored data would pass its quota
	CodeUnsupportedMedia = "unsupported_media_type" // 415: the body is not application/json
	CodeBusy             = "busy"                   // 429: every slot and queue place is taken (see Retry-After)
	CodeInternal         = "internal"               // 500: the daemon failed
	CodeNotReady         = "not_ready"              // 503: the daemon cannot run code now (see Retry-After)
	CodeBadGateway       = "bad_gateway"            // 502: a session's port did not answer (nothing listens, or it broke the exchange)
	CodeGatewayTimeout   = "gateway_timeout"        // 504: a session's port sent no answer in time
)

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: the "error" object of an error body, of a stream's error
// line, and of GET /readyz's answer when not ready.
type ErrorDetail struct {
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Message says what was wrong and how to fix it, for a person.
	Message string `json:"message"`
	// Field names the request field (or query parameter) at fault, if any.
	Field string `json:"field,omitempty"`
	// Violations lists, for invalid_input, each way the input breaks the input schema.
	Violations []Violation `json:"violations,omitempty"`
}

// Violation is one way a JSON value breaks a JSON Schema.
type Violation struct {
	// Pointer is the JSON pointer (RFC 6901) of the failing value ("" for the whole value).
	Pointer string `json:"pointer"`
	// Message says what is wrong there.
	Message string `json:"message"`
}

// Status is the answer of GET /healthz ("ok") and GET /readyz ("ready", or "not_ready" with
// Error).
type Status struct {
	Status string       `json:"status"`
	Error  *ErrorDetail `json:"error,omitempty"`
	// Warmth is how warm the slots are (GET /readyz of a daemon whose runtime says so).
	Warmth *Warmth `json:"warmth,omitempty"`
}

// Warmth is how warm a daemon's slots are (Status.Warmth): a daemon is ready with one slot up,
// but its runs start as forks of a preloaded interpreter (fast) only once ForkSlots are up;
// before, they start cold (seconds slower with the default preload). GET /readyz?warm=true
// answers 503 until Warm.
type Warmth struct {
	// Slots is the pool's size, SlotsUp how many slots are up, ForkSlots how many of those
	// start runs as forks now.
	Slots     int `json:"slots"`
	SlotsUp   int `json:"slots_up"`
	ForkSlots int `json:"fork_slots"`
	// ForkOff says why no run will start as a fork (absent when they may).
	ForkOff string `json:"fork_off,omitempty"`
	// Warm says every slot is up and forks its runs (or never will).
	Warm bool `json:"warm"`
	// WarmSessions is how many warm session sandboxes are ready to claim, their executors
	// started (the configuration's warm_sessions is the most kept).
	WarmSessions int `json:"warm_sessions"`
}
