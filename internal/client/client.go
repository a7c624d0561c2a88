// Package client is a typed Go client of sandpit's REST API (see package httpapi), used by the
// CLI to talk to a running daemon.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Client calls one sandpit daemon. It is safe for concurrent use.
type Client struct {
	base   string
	hc     *http.Client
	source string // sent as httpapi.SourceHeader
	token  string // sent as a bearer token
}

// WithToken returns a copy of c that sends token as its bearer token ("" sends none).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// As returns a copy of c whose runs are recorded with source ("cli" or "mcp").
func (c *Client) As(source string) *Client {
	cc := *c
	cc.source = source
	return &cc
}

// New returns a Client of the daemon at baseURL (for example "http://127.0.0.1:7070").
// httpClient nil means a client with no overall timeout, since runs can be long: bound each
// call with its context instead.
func New(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: httpClient}
}

// ExecuteRequest is the body of POST /v1/executions.
type ExecuteRequest struct {
	// Code is the Python source to run (UTF-8).
	Code string `json:"code"`
	// Input is the JSON value the code sees as INPUT; nil sends none (null).
	Input json.RawMessage `json:"input,omitempty"`
	// TimeoutMS is the wall-clock limit in milliseconds; nil means the daemon's default.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Agent is the namespace of the run; empty means "default".
	Agent string `json:"agent,omitempty"`
	// Dependencies are PEP 508 requirements installed (when missing) before the run.
	Dependencies []string `json:"dependencies,omitempty"`
}

// Limits are the daemon's effective limits (GET /v1/limits).
type Limits = httpapi.Limits

// APIError is an error answer of the daemon.
type APIError struct {
	// Status is the HTTP status; 0 when the error came as the last line of a stream, after the
	// run had started.
	Status int
	// Code is the API's error code (invalid_request, too_large, busy, not_ready, internal, ...);
	// empty when the answer was not a sandpit error body.
	Code string
	// Message says what went wrong, for a person.
	Message string
	// Field names the request field at fault, if any.
	Field string
	// RetryAfter is when to try again (from Retry-After), 0 when not given.
	RetryAfter time.Duration
	// Violations lists, for invalid_input, each way the input breaks the code's input schema.
	Violations []library.Violation
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Field != "" && !strings.Contains(msg, e.Field) {
		msg = e.Field + ": " + msg
	}
	if e.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if len(e.Violations) > 0 && !strings.Contains(msg, e.Violations[0].Message) {
		for _, v := range e.Violations {
			msg += fmt.Sprintf("\n  at %q: %s", v.Pointer, v.Message)
		}
	}
	if e.RetryAfter > 0 && !strings.Contains(msg, "retry after") {
		msg += fmt.Sprintf("; retry after %s", e.RetryAfter)
	}
	return msg
}

// Health returns nil when a sandpit daemon answers GET /healthz, and an error when nothing (or
// something else) answers. Pass a ctx with a short timeout to probe quickly.
func (c *Client) Health(ctx context.Context) error {
	var body struct {
		Status string `json:"status"`
	}
	if err := c.getJSON(ctx, "/healthz", &body); err != nil {
		return err
	}
	if body.Status != "ok" {
		return fmt.Errorf("GET %s/healthz: unexpected answer (status %q): is this a sandpit daemon?", c.base, body.Status)
	}
	return nil
}

// Ready returns nil when the daemon can take runs, or an error (an *APIError with Code
// "not_ready" when the daemon says it cannot) saying why not.
func (c *Client) Ready(ctx context.Context) error {
	var body struct {
		Status string `json:"status"`
	}
	if err := c.getJSON(ctx, "/readyz", &body); err != nil {
		return err
	}
	if body.Status != "ready" {
		return fmt.Errorf("GET %s/readyz: unexpected answer (status %q)", c.base, body.Status)
	}
	return nil
}

// Limits returns the daemon's effective limits.
func (c *Client) Limits(ctx context.Context) (Limits, error) {
	var l Limits
	err := c.getJSON(ctx, "/v1/limits", &l)
	return l, err
}

// Execute runs req and returns its Result; a program that fails is a Result with its Outcome,
// not an error. Errors are *APIError when the daemon refused or failed the run.
//
// When onEvent is not nil the answer is streamed and onEvent receives each stdout and stderr
// chunk, in order, as it arrives (the Result still holds the whole output).
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, onEvent func(sandbox.Event)) (sandbox.Result, error) {
	if !utf8.ValidString(req.Code) {
		// JSON would silently replace the bad bytes with U+FFFD.
		return sandbox.Result{}, errors.New("code is not valid UTF-8; sandpit runs UTF-8 Python source")
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return sandbox.Result{}, errors.New("input is not valid JSON")
	}
	return c.execute(ctx, "/v1/executions", req, onEvent)
}

// execute POSTs body to path, a route that runs code, and reads its result (see Execute).
func (c *Client) execute(ctx context.Context, path string, body any, onEvent func(sandbox.Event)) (sandbox.Result, error) {
	accept := "application/json"
	if onEvent != nil {
		accept = httpapi.NDJSONContentType + ", application/json;q=0.5"
	}
	resp, err := c.send(ctx, http.MethodPost, path, body, accept)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == httpapi.NDJSONContentType {
		return readStream(resp.Body, onEvent)
	}
	var res sandbox.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return sandbox.Result{}, fmt.Errorf("POST %s%s: reading the result: %w", c.base, path, err)
	}
	return res, nil
}

// send makes a request with body as JSON (nil: none) and returns a 2xx answer; other answers
// become *APIError.
func (c *Client) send(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	if body == nil {
		return c.sendRaw(ctx, method, path, nil, "", accept)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	return c.sendRaw(ctx, method, path, &buf, "application/json", accept)
}

// sendRaw makes a request with body of contentType (nil: none) and returns a 2xx answer; other
// answers become *APIError.
func (c *Client) sendRaw(ctx context.Context, method, path string, body io.Reader, contentType, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", accept)
	if c.source != "" {
		req.Header.Set(httpapi.SourceHeader, c.source)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	return resp, nil
}

// call makes a request with body as JSON (nil: none) and decodes the JSON answer into out.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s%s: reading the answer: %w", method, c.base, path, err)
	}
	return nil
}

// streamLine is any line of an NDJSON execution stream.
type streamLine struct {
	Type       sandbox.Stream            `json:"type"`
	Data       string                    `json:"data"`
	Dependency *sandbox.DependencyStatus `json:"dependency"`
	Level      string                    `json:"level"`
	Result     *sandbox.Result           `json:"result"`
	Error      *errorDetail              `json:"error"`
}

// readStream reads an NDJSON execution stream up to its result or error line. Lines can be
// large (the result holds all of stdout and stderr), so they are read whole, without a cap.
func readStream(r io.Reader, onEvent func(sandbox.Event)) (sandbox.Result, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l streamLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				if err != nil { // a last line cut short
					return sandbox.Result{}, fmt.Errorf("reading the execution stream: it ended in the middle of a line: %w", io.ErrUnexpectedEOF)
				}
				return sandbox.Result{}, fmt.Errorf("reading the execution stream: bad line: %w", jerr)
			}
			switch l.Type {
			case "stdout", "stderr":
				if onEvent != nil {
					onEvent(sandbox.Event{Stream: l.Type, Data: l.Data})
				}
			case "dependency":
				if onEvent != nil && l.Dependency != nil {
					onEvent(sandbox.Event{Stream: l.Type, Dependency: l.Dependency})
				}
			case "log":
				if onEvent != nil {
					onEvent(sandbox.Event{Stream: l.Type, Data: l.Data, Level: l.Level})
				}
			case "result":
				if l.Result == nil {
					return sandbox.Result{}, errors.New("reading the execution stream: result line without a result")
				}
				return *l.Result, nil
			case "error":
				e := &APIError{Code: "internal", Message: "the stream reported an error without details"}
				if l.Error != nil {
					e.Code, e.Message, e.Field = l.Error.Code, l.Error.Message, l.Error.Field
				}
				return sandbox.Result{}, e
			}
			// Other types are for newer clients; skip them.
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return sandbox.Result{}, fmt.Errorf("reading the execution stream: it ended before the result: %w", err)
		}
	}
}

type errorDetail struct {
	Code       string              `json:"code"`
	Message    string              `json:"message"`
	Field      string              `json:"field"`
	Violations []library.Violation `json:"violations"`
}

// getJSON GETs path and decodes a 2xx JSON answer into v; other answers become *APIError.
func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	return c.call(ctx, http.MethodGet, path, nil, v)
}

// apiError reads a non-2xx answer into an *APIError.
func apiError(resp *http.Response) *APIError {
	e := &APIError{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Error *errorDetail `json:"error"`
	}
	if json.Unmarshal(text, &body) == nil && body.Error != nil {
		e.Code, e.Message, e.Field, e.Violations = body.Error.Code, body.Error.Message, body.Error.Field, body.Error.Violations
		return e
	}
	// Not a sandpit error body (a proxy, or another server): keep a little of its text.
	msg := strings.TrimSpace(string(text))
	if len(msg) > 200 {
		msg = strings.ToValidUTF8(msg[:200], "") + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

// retryAfter parses a Retry-After value (seconds or an HTTP date); 0 when absent or bad.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return max(time.Duration(secs)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t).Round(time.Second), 0)
	}
	return 0
}
