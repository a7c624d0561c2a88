// Package client is a typed Go client of sandpit's REST API (see package httpapi), used by the
// CLI to talk to a running daemon.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
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
	RunFiles
}

// RunFiles are the fields about files of a request that runs code (an execution, a saved-code
// run).
type RunFiles struct {
	// Files are written into the run's working directory before its code starts (see
	// InputFileOf). The daemon's caps on their count and bytes are in GET /v1/limits.
	Files []InputFile `json:"files,omitempty"`
	// Charts, when not nil, says whether open matplotlib figures and PIL images shown are saved
	// as output files (figure-1.png, …); nil means the daemon's setting.
	Charts *bool `json:"charts,omitempty"`
	// InlineFiles asks for the bytes of each output file of at most 1 MiB in the answer
	// (Answer.Inline); larger ones are fetched with OpenFile.
	InlineFiles bool `json:"inline_files,omitempty"`
}

// InputFile is a file handed to a run, as the REST API takes it.
type InputFile struct {
	// Name is its path relative to the run's working directory ("data.csv", "in/a.json");
	// sandbox.CheckFileName says which names are allowed.
	Name string `json:"name"`
	// Content is its bytes: the text itself with Encoding "utf-8", standard base64 with
	// "base64".
	Content string `json:"content"`
	// Encoding is "utf-8" (also when empty) or "base64".
	Encoding string `json:"encoding,omitempty"`
}

// The encodings of InputFile.Content.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// InputFileOf returns the InputFile named name with content: as text when content is valid
// UTF-8 that JSON does not make larger than base64 would (a file of NUL bytes is valid UTF-8
// but six times its size as JSON text), as base64 otherwise, so its bytes arrive unchanged
// either way and the request stays within the daemon's body limit.
func InputFileOf(name string, content []byte) InputFile {
	if utf8.Valid(content) && jsonTextBytes(content) <= base64.StdEncoding.EncodedLen(len(content)) {
		return InputFile{Name: name, Content: string(content), Encoding: EncodingUTF8}
	}
	return InputFile{Name: name, Content: base64.StdEncoding.EncodeToString(content), Encoding: EncodingBase64}
}

// jsonTextBytes is the size of text (valid UTF-8) as a JSON string: NUL bytes and other
// control characters take six bytes each there (\u0000), so a file of them is smaller in
// base64.
func jsonTextBytes(text []byte) int {
	n := 2
	for _, c := range text {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		default:
			n++
		}
	}
	return n
}

// Answer is the answer of a run: its Result and the bytes of the output files it carried.
type Answer struct {
	sandbox.Result
	// Inline maps an output file's name to its bytes, for each file the answer carried inline
	// (asked with RunFiles.InlineFiles: those of at most 1 MiB). Their size and SHA-256 were
	// checked against the file's entry in Result.Files. Nil when none.
	Inline map[string][]byte
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
// chunk, in order, as it arrives (the Result still holds the whole output), and an event of
// stream "file" per output file (its File, no Content) before the result.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, onEvent func(sandbox.Event)) (sandbox.Result, error) {
	a, err := c.ExecuteAnswer(ctx, req, onEvent)
	return a.Result, err
}

// ExecuteAnswer is Execute, answering also the output files' bytes the daemon put inline
// (asked with req.InlineFiles).
func (c *Client) ExecuteAnswer(ctx context.Context, req ExecuteRequest, onEvent func(sandbox.Event)) (Answer, error) {
	if !utf8.ValidString(req.Code) {
		// JSON would silently replace the bad bytes with U+FFFD.
		return Answer{}, errors.New("code is not valid UTF-8; sandpit runs UTF-8 Python source")
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return Answer{}, errors.New("input is not valid JSON")
	}
	return c.execute(ctx, "/v1/executions", req, onEvent)
}

// execute POSTs body to path, a route that runs code, and reads its answer (see Execute).
func (c *Client) execute(ctx context.Context, path string, body any, onEvent func(sandbox.Event)) (Answer, error) {
	accept := "application/json"
	if onEvent != nil {
		accept = httpapi.NDJSONContentType + ", application/json;q=0.5"
	}
	resp, err := c.send(ctx, http.MethodPost, path, body, accept)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == httpapi.NDJSONContentType {
		return readStream(resp.Body, onEvent)
	}
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, fmt.Errorf("POST %s%s: reading the result: %w", c.base, path, err)
	}
	a, err := decodeAnswer(text)
	if err != nil {
		return Answer{}, fmt.Errorf("POST %s%s: reading the result: %w", c.base, path, err)
	}
	return a, nil
}

// decodeAnswer reads a run's result (JSON) with the inline bytes of its output files.
func decodeAnswer(text []byte) (Answer, error) {
	var a Answer
	if err := json.Unmarshal(text, &a.Result); err != nil {
		return Answer{}, err
	}
	var inline struct {
		Files []struct {
			Name          string  `json:"name"`
			ContentBase64 *[]byte `json:"content_base64"`
		} `json:"files"`
	}
	if err := json.Unmarshal(text, &inline); err != nil {
		return Answer{}, err
	}
	for i, f := range inline.Files {
		if f.ContentBase64 == nil {
			continue
		}
		if err := checkContent(a.Result.Files[i], *f.ContentBase64); err != nil {
			return Answer{}, err
		}
		if a.Inline == nil {
			a.Inline = map[string][]byte{}
		}
		a.Inline[f.Name] = *f.ContentBase64
	}
	return a, nil
}

// checkContent returns an error when content is not the bytes f describes (its size and
// SHA-256).
func checkContent(f sandbox.File, content []byte) error {
	if !f.Holds(content) {
		sum := sha256.Sum256(content)
		return fmt.Errorf("output file %q: its %d bytes (sha256 %x) are not those its entry lists (%d bytes, sha256 %s)",
			f.Name, len(content), sum, f.SizeBytes, f.SHA256)
	}
	return nil
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
	File       *sandbox.File             `json:"file"`
	Result     json.RawMessage           `json:"result"`
	Error      *errorDetail              `json:"error"`
}

// readStream reads an NDJSON execution stream up to its result or error line. Lines can be
// large (the result holds all of stdout and stderr), so they are read whole, without a cap.
func readStream(r io.Reader, onEvent func(sandbox.Event)) (Answer, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l streamLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				if err != nil { // a last line cut short
					return Answer{}, fmt.Errorf("reading the execution stream: it ended in the middle of a line: %w", io.ErrUnexpectedEOF)
				}
				return Answer{}, fmt.Errorf("reading the execution stream: bad line: %w", jerr)
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
			case sandbox.StreamFile:
				if onEvent != nil && l.File != nil {
					onEvent(sandbox.Event{Stream: l.Type, File: l.File})
				}
			case "result":
				if len(l.Result) == 0 || string(l.Result) == "null" {
					return Answer{}, errors.New("reading the execution stream: result line without a result")
				}
				a, err := decodeAnswer(l.Result)
				if err != nil {
					return Answer{}, fmt.Errorf("reading the execution stream: bad result: %w", err)
				}
				return a, nil
			case "error":
				e := &APIError{Code: "internal", Message: "the stream reported an error without details"}
				if l.Error != nil {
					e.Code, e.Message, e.Field = l.Error.Code, l.Error.Message, l.Error.Field
				}
				return Answer{}, e
			}
			// Other types are for newer clients; skip them.
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Answer{}, fmt.Errorf("reading the execution stream: it ended before the result: %w", err)
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
