// Package client is a typed Go client of sandpit's REST API, used by the CLI and the MCP
// server to talk to a running daemon. Its requests and answers are the wire types of package
// apitype; it links nothing of the daemon (no store, SQLite, scheduler or schema code), which
// deps_test.go holds it to.
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

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// Client calls one sandpit daemon. It is safe for concurrent use.
type Client struct {
	base   string
	hc     *http.Client
	source apitype.Source // sent as apitype.SourceHeader
	token  string         // sent as a bearer token
}

// WithToken returns a copy of c that sends token as its bearer token ("" sends none).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// As returns a copy of c whose runs are recorded with source (apitype.SourceCLI or
// apitype.SourceMCP; the daemon records any other as apitype.SourceAPI).
func (c *Client) As(source apitype.Source) *Client {
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

// InputFileOf returns the InputFile named name with content: as text when content is valid
// UTF-8 that JSON does not make larger than base64 would (a file of NUL bytes is valid UTF-8
// but six times its size as JSON text), as base64 otherwise, so its bytes arrive unchanged
// either way and the request stays within the daemon's body limit.
func InputFileOf(name string, content []byte) apitype.InputFile {
	if utf8.Valid(content) && jsonTextBytes(content) <= base64.StdEncoding.EncodedLen(len(content)) {
		return apitype.InputFile{Name: name, Content: string(content), Encoding: apitype.EncodingUTF8}
	}
	return apitype.InputFile{Name: name, Content: base64.StdEncoding.EncodeToString(content), Encoding: apitype.EncodingBase64}
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
	apitype.Result
	// Inline maps an output file's name to its bytes, for each file the answer carried inline
	// (asked with RunFiles.InlineFiles: those of at most 1 MiB). Their size and SHA-256 were
	// checked against the file's entry in Result.Files. Nil when none.
	Inline map[string][]byte
}

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
	Violations []apitype.Violation
}

// Is makes an APIError of the class (package errclass) of its Code, or of its Status when
// the answer was not a sandpit error body: errors.Is(err, errclass.NotFound).
func (e *APIError) Is(target error) bool {
	c := classOf(e.Code, e.Status)
	return c != nil && target == c
}

// classOf is the error class of an API error code, or of an HTTP status for an answer without
// one; nil for an internal failure or an unknown code.
func classOf(code string, status int) error {
	switch code {
	case apitype.CodeInvalidRequest, apitype.CodeInvalidInput, apitype.CodeMethodNotAllowed, apitype.CodeUnsupportedMedia:
		return errclass.Invalid
	case apitype.CodeUnauthorized, apitype.CodeForbidden:
		return errclass.Forbidden
	case apitype.CodeNotFound:
		return errclass.NotFound
	case apitype.CodeConflict:
		return errclass.Conflict
	case apitype.CodeGone:
		return errclass.Gone
	case apitype.CodeTooLarge, apitype.CodeQuotaExceeded:
		return errclass.TooLarge
	case apitype.CodeBusy:
		return errclass.Busy
	case apitype.CodeNotReady:
		return errclass.Unavailable
	case apitype.CodeInternal:
		return nil
	}
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return errclass.Invalid
	case http.StatusUnauthorized, http.StatusForbidden:
		return errclass.Forbidden
	case http.StatusNotFound:
		return errclass.NotFound
	case http.StatusConflict:
		return errclass.Conflict
	case http.StatusGone:
		return errclass.Gone
	case http.StatusRequestEntityTooLarge:
		return errclass.TooLarge
	case http.StatusTooManyRequests:
		return errclass.Busy
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return errclass.Unavailable
	}
	return nil
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
	var body apitype.Status
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
	_, err := c.Warmth(ctx)
	return err
}

// Warmth returns how warm the daemon's slots are (nil from a daemon that does not say), and
// as Ready whether it can take runs.
func (c *Client) Warmth(ctx context.Context) (*apitype.Warmth, error) {
	var body apitype.Status
	if err := c.getJSON(ctx, "/readyz", &body); err != nil {
		return nil, err
	}
	if body.Status != "ready" {
		return body.Warmth, fmt.Errorf("GET %s/readyz: unexpected answer (status %q)", c.base, body.Status)
	}
	return body.Warmth, nil
}

// Limits returns the daemon's effective limits.
func (c *Client) Limits(ctx context.Context) (apitype.Limits, error) {
	var l apitype.Limits
	err := c.getJSON(ctx, "/v1/limits", &l)
	return l, err
}

// Execute runs req and returns its Result; a program that fails is a Result with its Outcome,
// not an error. Errors are *APIError when the daemon refused or failed the run.
//
// When onEvent is not nil the answer is streamed and onEvent receives each stdout and stderr
// chunk, in order, as it arrives (the Result still holds the whole output), and an event of
// stream "file" per output file (its File, no Content) before the result.
func (c *Client) Execute(ctx context.Context, req apitype.ExecuteRequest, onEvent func(apitype.Event)) (apitype.Result, error) {
	a, err := c.ExecuteAnswer(ctx, req, onEvent)
	return a.Result, err
}

// ExecuteAnswer is Execute, answering also the output files' bytes the daemon put inline
// (asked with req.InlineFiles).
func (c *Client) ExecuteAnswer(ctx context.Context, req apitype.ExecuteRequest, onEvent func(apitype.Event)) (Answer, error) {
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
func (c *Client) execute(ctx context.Context, path string, body any, onEvent func(apitype.Event)) (Answer, error) {
	accept := "application/json"
	if onEvent != nil {
		accept = apitype.NDJSONContentType + ", application/json;q=0.5"
	}
	resp, err := c.send(ctx, http.MethodPost, path, body, accept)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == apitype.NDJSONContentType {
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

// decodeAnswer reads a run's result (JSON) with the inline bytes of its output files, which
// it checks against their entries.
func decodeAnswer(text []byte) (Answer, error) {
	var a Answer
	if err := json.Unmarshal(text, &a.Result); err != nil {
		return Answer{}, err
	}
	return a, a.takeInline()
}

// takeInline moves the inline bytes of a's output files into a.Inline, checking each against
// its entry's size and SHA-256.
func (a *Answer) takeInline() error {
	for i, f := range a.Files {
		if f.ContentBase64 == "" {
			continue
		}
		a.Files[i].ContentBase64 = ""
		content, err := base64.StdEncoding.DecodeString(f.ContentBase64)
		if err != nil {
			return fmt.Errorf("output file %q: content_base64 is not base64: %w", f.Name, err)
		}
		if err := CheckContent(a.Files[i], content); err != nil {
			return err
		}
		if a.Inline == nil {
			a.Inline = map[string][]byte{}
		}
		a.Inline[f.Name] = content
	}
	return nil
}

// CheckContent returns an error when content is not the bytes f describes (its size and
// SHA-256).
func CheckContent(f apitype.File, content []byte) error {
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
		req.Header.Set(apitype.SourceHeader, string(c.source))
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

// readStream reads an NDJSON execution stream up to its result or error line. Lines can be
// large (the result holds all of stdout and stderr), so they are read whole, without a cap.
func readStream(r io.Reader, onEvent func(apitype.Event)) (Answer, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l apitype.StreamLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				if err != nil { // a last line cut short
					return Answer{}, fmt.Errorf("reading the execution stream: it ended in the middle of a line: %w", io.ErrUnexpectedEOF)
				}
				return Answer{}, fmt.Errorf("reading the execution stream: bad line: %w", jerr)
			}
			switch l.Type {
			case apitype.StreamStdout, apitype.StreamStderr, apitype.StreamLog, apitype.StreamDependency, apitype.StreamFile, apitype.StreamDisplay:
				if onEvent != nil {
					onEvent(apitype.Event{Stream: l.Type, Data: l.Data, Dependency: l.Dependency, Level: l.Level, File: l.File, Display: l.Display})
				}
			case apitype.StreamResult:
				if l.Result == nil {
					return Answer{}, errors.New("reading the execution stream: result line without a result")
				}
				a := Answer{Result: *l.Result}
				if err := a.takeInline(); err != nil {
					return Answer{}, fmt.Errorf("reading the execution stream: bad result: %w", err)
				}
				return a, nil
			case apitype.StreamError:
				return Answer{}, streamError(l.Error)
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

// streamError is the error of a stream's error line, whose run had started (Status 0).
func streamError(d *apitype.ErrorDetail) *APIError {
	if d == nil {
		return &APIError{Code: apitype.CodeInternal, Message: "the stream reported an error without details"}
	}
	return &APIError{Code: d.Code, Message: d.Message, Field: d.Field, Violations: d.Violations}
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
		Error *apitype.ErrorDetail `json:"error"`
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
