// Package e2bclient is a small client of the E2B API, written from E2B's published specs
// (spec/openapi.yml, spec/envd/envd.yaml, the envd protos) and the Connect protocol's spec
// (connectrpc.com/docs/protocol), speaking as the E2B SDKs do: the same paths, headers
// (X-API-Key; E2b-Sandbox-Id, E2b-Sandbox-Port and X-Access-Token on sandbox traffic, all to
// one sandbox URL), bodies and framing. sandpit's conformance tests and `sandpit bench` use it;
// it shares no code with the server (internal/e2b), so that it checks the wire, not the code.
package e2bclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Ports of sandbox traffic.
const (
	EnvdPort        = "49983"
	InterpreterPort = "49999"
)

// Client talks to one E2B API: APIURL for the control plane, SandboxURL for sandbox traffic
// (the SDKs' E2B_API_URL and E2B_SANDBOX_URL).
type Client struct {
	APIURL, SandboxURL, APIKey string
	HTTP                       *http.Client
}

// Error is an answer other than success: the HTTP status, and the body's code and message
// (E2B's {code, message}, or a Connect error's code name).
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("HTTP %d (%s): %s", e.Status, e.Code, e.Message)
}

// StatusOf is err's HTTP status, 0 when it is not an *Error.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// errorOf reads a failed answer.
func errorOf(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	}
	e := &Error{Status: resp.StatusCode, Message: string(raw)}
	if json.Unmarshal(raw, &body) == nil {
		e.Code, e.Message = fmt.Sprint(body.Code), body.Message
	}
	return e
}

// Control sends a control-plane request with X-API-Key and decodes a JSON answer into out
// (nil: ignored). It returns the answer's headers.
func (c *Client) Control(ctx context.Context, method, path string, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.APIURL+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-API-Key", c.APIKey)
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp.Header, errorOf(resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.Header, fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// Sandbox is E2B's Sandbox, the answer to create and connect.
type Sandbox struct {
	TemplateID         string `json:"templateID"`
	SandboxID          string `json:"sandboxID"`
	ClientID           string `json:"clientID"`
	EnvdVersion        string `json:"envdVersion"`
	EnvdAccessToken    string `json:"envdAccessToken"`
	TrafficAccessToken string `json:"trafficAccessToken"`
}

// Create is POST /sandboxes with body (E2B's NewSandbox).
func (c *Client) Create(ctx context.Context, body map[string]any) (Sandbox, error) {
	var sb Sandbox
	_, err := c.Control(ctx, http.MethodPost, "/sandboxes", body, &sb)
	return sb, err
}

// Kill is DELETE /sandboxes/{id}.
func (c *Client) Kill(ctx context.Context, id string) error {
	_, err := c.Control(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
	return err
}

// Conn is sandbox traffic to one sandbox.
type Conn struct {
	c            *Client
	ID, Token    string
	TrafficToken bool // send the token as E2B-Traffic-Access-Token (as the SDKs do on /contexts)
}

// Conn returns the traffic of sandbox id with its access token.
func (c *Client) Conn(id, token string) *Conn { return &Conn{c: c, ID: id, Token: token} }

func (s *Conn) request(ctx context.Context, port, method, path string, body io.Reader, contentType string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.c.SandboxURL+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("E2b-Sandbox-Id", s.ID)
	req.Header.Set("E2b-Sandbox-Port", port)
	if s.Token != "" {
		if s.TrafficToken {
			req.Header.Set("E2B-Traffic-Access-Token", s.Token)
		} else {
			req.Header.Set("X-Access-Token", s.Token)
		}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, nil
}

func (s *Conn) do(req *http.Request, out any) error {
	resp, err := s.c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return errorOf(resp)
	}
	if out == nil {
		return nil
	}
	if b, ok := out.(*[]byte); ok {
		*b, err = io.ReadAll(resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Execution is what POST /execute streamed.
type Execution struct {
	Stdout, Stderr []string
	Results        []map[string]any
	Error          *ExecutionError
	ExecutionCount int
	Ended          bool // end_of_execution came
}

// ExecutionError is the error line of /execute.
type ExecutionError struct {
	Name, Value, Traceback string
}

// Text is the main result's text, "" when there is none.
func (e Execution) Text() string {
	for _, r := range e.Results {
		if main, _ := r["is_main_result"].(bool); main {
			t, _ := r["text"].(string)
			return t
		}
	}
	return ""
}

// RunCode is POST /execute (port 49999) with code, reading the NDJSON stream. contextID and
// env may be empty.
func (s *Conn) RunCode(ctx context.Context, code, contextID string, env map[string]string) (Execution, error) {
	body := map[string]any{"code": code, "context_id": nil, "language": nil, "env_vars": nil}
	if contextID != "" {
		body["context_id"] = contextID
	}
	if env != nil {
		body["env_vars"] = env
	}
	raw, _ := json.Marshal(body)
	req, err := s.request(ctx, InterpreterPort, http.MethodPost, "/execute", bytes.NewReader(raw), "application/json")
	if err != nil {
		return Execution{}, err
	}
	resp, err := s.c.http().Do(req)
	if err != nil {
		return Execution{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return Execution{}, errorOf(resp)
	}
	var ex Execution
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return ex, fmt.Errorf("a line of /execute is not JSON: %q", sc.Text())
		}
		str := func(k string) string { v, _ := line[k].(string); return v }
		switch line["type"] {
		case "stdout":
			ex.Stdout = append(ex.Stdout, str("text"))
		case "stderr":
			ex.Stderr = append(ex.Stderr, str("text"))
		case "result":
			delete(line, "type")
			ex.Results = append(ex.Results, line)
		case "error":
			ex.Error = &ExecutionError{Name: str("name"), Value: str("value"), Traceback: str("traceback")}
		case "number_of_executions":
			n, _ := line["execution_count"].(float64)
			ex.ExecutionCount = int(n)
		case "end_of_execution":
			ex.Ended = true
		case "unexpected_end_of_execution":
			return ex, errors.New("the execution ended unexpectedly")
		default:
			return ex, fmt.Errorf("/execute sent a line of unknown type: %q", sc.Text())
		}
	}
	return ex, sc.Err()
}

// Interpreter sends a JSON request to the code interpreter (port 49999), e.g. /contexts.
func (s *Conn) Interpreter(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := s.request(ctx, InterpreterPort, method, path, rd, "application/json")
	if err != nil {
		return err
	}
	return s.do(req, out)
}

// Health is envd's GET /health.
func (s *Conn) Health(ctx context.Context) error {
	req, err := s.request(ctx, EnvdPort, http.MethodGet, "/health", nil, "")
	if err != nil {
		return err
	}
	return s.do(req, nil)
}

// WriteFile uploads data to path: as application/octet-stream, or as multipart/form-data
// (one part named file whose filename is the path, with the path in the query as the SDKs
// send one file).
func (s *Conn) WriteFile(ctx context.Context, path string, data []byte, asMultipart bool) ([]map[string]any, error) {
	q := "/files?" + url.Values{"path": {path}}.Encode()
	var (
		req *http.Request
		err error
	)
	if asMultipart {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, err := mw.CreateFormFile("file", path)
		if err != nil {
			return nil, err
		}
		_, _ = fw.Write(data)
		_ = mw.Close()
		req, err = s.request(ctx, EnvdPort, http.MethodPost, q, &buf, mw.FormDataContentType())
	} else {
		req, err = s.request(ctx, EnvdPort, http.MethodPost, q, bytes.NewReader(data), "application/octet-stream")
	}
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	return out, s.do(req, &out)
}

// ReadFile is GET /files?path=path.
func (s *Conn) ReadFile(ctx context.Context, path string) ([]byte, error) {
	req, err := s.request(ctx, EnvdPort, http.MethodGet, "/files?"+url.Values{"path": {path}}.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	var out []byte
	return out, s.do(req, &out)
}

// Unary calls procedure ("/filesystem.Filesystem/ListDir") with the Connect protocol's
// unary JSON: a POST of the message as application/json with Connect-Protocol-Version 1.
func (s *Conn) Unary(ctx context.Context, procedure string, msg, out any) error {
	raw, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	req, err := s.request(ctx, EnvdPort, http.MethodPost, procedure, bytes.NewReader(raw), "application/json")
	if err != nil {
		return err
	}
	req.Header.Set("Connect-Protocol-Version", "1")
	return s.do(req, out)
}

// Envelope flags of the Connect protocol's streams.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// Stream calls a server-streaming procedure: the request is one enveloped JSON message
// (application/connect+json), the answer enveloped messages passed to each, then the
// end-of-stream frame, whose error (if any) is returned. each may stop the stream by
// returning an error.
func (s *Conn) Stream(ctx context.Context, procedure string, msg any, each func(json.RawMessage) error) error {
	raw, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	env := make([]byte, 5, 5+len(raw))
	binary.BigEndian.PutUint32(env[1:], uint32(len(raw)))
	req, err := s.request(ctx, EnvdPort, http.MethodPost, procedure, bytes.NewReader(append(env, raw...)), "application/connect+json")
	if err != nil {
		return err
	}
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	resp, err := s.c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorOf(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/connect+json") {
		return fmt.Errorf("a stream answered Content-Type %q, not application/connect+json", ct)
	}
	br := bufio.NewReader(resp.Body)
	for {
		var head [5]byte
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return fmt.Errorf("the stream ended without its end-of-stream frame: %w", err)
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(br, body); err != nil {
			return fmt.Errorf("a frame of the stream was cut short: %w", err)
		}
		if head[0]&flagCompressed != 0 {
			return errors.New("the server compressed a frame the client did not ask to compress")
		}
		if head[0]&flagEndStream != 0 {
			var end struct {
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &end); err != nil {
				return fmt.Errorf("the end-of-stream frame is not JSON: %q", body)
			}
			if end.Error != nil {
				return &Error{Status: http.StatusOK, Code: end.Error.Code, Message: end.Error.Message}
			}
			return nil
		}
		if err := each(body); err != nil {
			return err
		}
	}
}

// processEvent is envd's ProcessEvent in the Connect protocol's JSON (protojson: bytes in
// base64, zero values left out).
type processEvent struct {
	Event struct {
		Start *struct {
			PID uint32 `json:"pid"`
		} `json:"start"`
		Data *struct {
			Stdout []byte `json:"stdout"`
			Stderr []byte `json:"stderr"`
			PTY    []byte `json:"pty"`
		} `json:"data"`
		End *struct {
			ExitCode int    `json:"exitCode"`
			Exited   bool   `json:"exited"`
			Status   string `json:"status"`
			Error    string `json:"error"`
		} `json:"end"`
		Keepalive *struct{} `json:"keepalive"`
	} `json:"event"`
}

// CommandResult is a process's output and end as envd streamed them.
type CommandResult struct {
	PID            uint32
	Stdout, Stderr string
	PTY            []byte
	ExitCode       int
	Exited         bool
	Status, Error  string
	Keepalives     int
}

// Run starts cmd as the SDKs' commands.run does (process.Process/Start with /bin/bash -l -c
// cmd, stdin closed) and follows it to its end. onStart, when not nil, gets its PID as soon as
// the start event comes.
func (s *Conn) Run(ctx context.Context, cmd string, env map[string]string, onStart func(pid uint32)) (CommandResult, error) {
	msg := map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}, "envs": env}, "stdin": false}
	return s.follow(ctx, "/process.Process/Start", msg, onStart)
}

// Attach follows the running process pid (process.Process/Connect) to its end.
func (s *Conn) Attach(ctx context.Context, pid uint32, onStart func(pid uint32)) (CommandResult, error) {
	return s.follow(ctx, "/process.Process/Connect", map[string]any{"process": map[string]any{"pid": pid}}, onStart)
}

func (s *Conn) follow(ctx context.Context, procedure string, msg any, onStart func(pid uint32)) (CommandResult, error) {
	var (
		res   CommandResult
		ended bool
	)
	err := s.Stream(ctx, procedure, msg, func(raw json.RawMessage) error {
		var ev processEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("a process event is not the JSON of ProcessEvent: %q: %w", raw, err)
		}
		switch e := ev.Event; {
		case e.Start != nil:
			res.PID = e.Start.PID
			if onStart != nil {
				onStart(res.PID)
			}
		case e.Data != nil:
			res.Stdout += string(e.Data.Stdout)
			res.Stderr += string(e.Data.Stderr)
			res.PTY = append(res.PTY, e.Data.PTY...)
		case e.End != nil:
			res.ExitCode, res.Exited, res.Status, res.Error, ended = e.End.ExitCode, e.End.Exited, e.End.Status, e.End.Error, true
		case e.Keepalive != nil:
			res.Keepalives++
		default:
			return fmt.Errorf("a process event of no known kind: %s", raw)
		}
		return nil
	})
	if err == nil && !ended {
		err = errors.New("the process's stream ended without its end event")
	}
	return res, err
}

// Signal sends process pid SIGNAL_SIGTERM or SIGNAL_SIGKILL (process.Process/SendSignal).
func (s *Conn) Signal(ctx context.Context, pid uint32, signal string) error {
	return s.Unary(ctx, "/process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": signal}, &struct{}{})
}

// StartProcess starts a process with msg, E2B's StartRequest ({"process": {"cmd", "args",
// "cwd", …}, "pty": {"size": …}}), and follows it to its end, as the SDKs' commands.run and
// pty.create do.
func (s *Conn) StartProcess(ctx context.Context, msg any, onStart func(pid uint32)) (CommandResult, error) {
	return s.follow(ctx, "/process.Process/Start", msg, onStart)
}

// FileURL composes a signed file URL as the SDKs' download_url (op "read") and upload_url
// (op "write") do: the sandbox URL's origin, /files, the path and E2B's v1 signature of the
// path, the operation, the default user ("") and the access token, expiring at expiry (Unix
// seconds; 0: never).
func (s *Conn) FileURL(path, op string, expiry int64) (string, error) {
	base, err := url.Parse(s.c.SandboxURL)
	if err != nil {
		return "", err
	}
	raw := path + ":" + op + "::" + s.Token
	q := url.Values{"path": {path}}
	if expiry != 0 {
		raw += ":" + strconv.FormatInt(expiry, 10)
		q.Set("signature_expiration", strconv.FormatInt(expiry, 10))
	}
	sum := sha256.Sum256([]byte(raw))
	q.Set("signature", "v1_"+strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "="))
	return base.Scheme + "://" + base.Host + "/files?" + q.Encode(), nil
}

// FetchURL sends method to u with body (nil: none; a POST is multipart with one part named
// file, as upload_url expects) and no header of E2B's: what a browser or curl given a signed
// URL does. It returns the answer's body.
func (c *Client) FetchURL(ctx context.Context, method, u, name string, body []byte) ([]byte, error) {
	var (
		rd io.Reader
		ct string
	)
	if body != nil {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, err := mw.CreateFormFile("file", name)
		if err != nil {
			return nil, err
		}
		_, _ = fw.Write(body)
		_ = mw.Close()
		rd, ct = &buf, mw.FormDataContentType()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, errorOf(resp)
	}
	return io.ReadAll(resp.Body)
}
