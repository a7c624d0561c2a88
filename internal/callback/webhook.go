package callback

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// SignatureHeader carries the HMAC-SHA256 of a webhook request's body, keyed with the shared
// secret, as "sha256=" and the lowercase hex digest (the form GitHub's webhooks use).
const SignatureHeader = "X-Sandpit-Signature"

// Webhook answers calls by POSTing each to the host application's URL as JSON
//
//	{"agent": "...", "execution_id": "ex_...", "method": "search_memory", "args": {...}}
//
// signed in SignatureHeader. A 2xx answer's JSON body is the return value, passed to the
// program as sent once its shape is checked (see Answer); any other status becomes agent.Error
// with the body's "error" string, or its text.
type Webhook struct {
	URL    string
	Secret []byte
	// Client makes the requests; nil means one with Timeout.
	Client *http.Client
	// Timeout bounds each request (default 10 s); MaxBytes caps an answer (default 4 MiB).
	Timeout  time.Duration
	MaxBytes int64
}

var _ RawHandler = (*Webhook)(nil)

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Answer sends the call and returns the host application's answer as it sent it, once its
// shape is checked: search_memory, get_facts and get_documents answer a JSON array of objects,
// query_graph an object with the arrays "nodes" and "edges", store_result an object. Its fields
// are the host application's: extra ones reach the program, and missing ones stay missing.
func (w *Webhook) Answer(ctx context.Context, scope sandbox.CallScope, method string, args any) (json.RawMessage, error) {
	data, status, err := w.send(ctx, scope, method, args)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 || string(data) == "null" {
		return nil, fmt.Errorf("%s: the host application answered HTTP %d with no JSON value; it must answer the method's result", method, status)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s: the host application's answer (HTTP %d) is not JSON", method, status)
	}
	var shapeErr error
	switch method {
	case "search_memory", "get_facts", "get_documents":
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil || items == nil {
			shapeErr = errors.New("must be a JSON array of objects")
		}
		for i, it := range items {
			if shapeErr == nil && !isObject(it) {
				shapeErr = fmt.Errorf("must be a JSON array of objects; item %d is not an object", i)
			}
		}
	case "query_graph":
		var g struct{ Nodes, Edges []json.RawMessage }
		if !isObject(data) || json.Unmarshal(data, &g) != nil || g.Nodes == nil || g.Edges == nil {
			shapeErr = errors.New(`must be {"nodes": [...], "edges": [...]}`)
		}
	case "store_result":
		if !isObject(data) {
			shapeErr = errors.New(`must be a JSON object, such as {"key": "...", "version": 1}`)
		}
	}
	if shapeErr != nil {
		return nil, fmt.Errorf("%s: the host application's answer %v", method, shapeErr)
	}
	return json.RawMessage(data), nil
}

func isObject(v json.RawMessage) bool {
	t := bytes.TrimSpace(v)
	return len(t) > 0 && t[0] == '{'
}

// post answers a call through Answer and decodes the answer into T, for Go callers of the
// typed methods (the program gets Answer's JSON itself).
func post[T any](ctx context.Context, w *Webhook, scope sandbox.CallScope, method string, args any) (T, error) {
	var v T
	data, err := w.Answer(ctx, scope, method, args)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%s: the host application's answer does not fit: %v", method, err)
	}
	return v, nil
}

// send POSTs the call, signed, and returns the body of a 2xx answer (trimmed) and its status;
// any other answer is an error with the host application's message.
func (w *Webhook) send(ctx context.Context, scope sandbox.CallScope, method string, args any) ([]byte, int, error) {
	body, err := json.Marshal(map[string]any{"agent": scope.Agent, "execution_id": scope.ExecutionID, "method": method, "args": args})
	if err != nil {
		return nil, 0, err
	}
	timeout, limit := w.Timeout, w.MaxBytes
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if limit <= 0 {
		limit = 4 << 20
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(w.Secret, body))
	client := w.Client
	if client == nil {
		client = &http.Client{Timeout: timeout,
			// The configured URL is the host application; a redirect elsewhere is not followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: the host application did not answer: %v", method, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: reading the host application's answer: %v", method, err)
	}
	if int64(len(data)) > limit {
		return nil, 0, fmt.Errorf("%s: the host application's answer is over %d bytes", method, limit)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if len(msg) > 1000 {
			msg = msg[:1000]
		}
		return nil, 0, fmt.Errorf("%s: %s (HTTP %d from the host application)", method, msg, resp.StatusCode)
	}
	return bytes.TrimSpace(data), resp.StatusCode, nil
}

func (w *Webhook) SearchMemory(ctx context.Context, scope sandbox.CallScope, a SearchMemoryArgs) ([]store.Memory, error) {
	return post[[]store.Memory](ctx, w, scope, "search_memory", a)
}

func (w *Webhook) GetFacts(ctx context.Context, scope sandbox.CallScope, a GetFactsArgs) ([]store.Fact, error) {
	return post[[]store.Fact](ctx, w, scope, "get_facts", a)
}

func (w *Webhook) QueryGraph(ctx context.Context, scope sandbox.CallScope, a QueryGraphArgs) (store.Graph, error) {
	return post[store.Graph](ctx, w, scope, "query_graph", a)
}

func (w *Webhook) GetDocuments(ctx context.Context, scope sandbox.CallScope, a GetDocumentsArgs) ([]store.Document, error) {
	return post[[]store.Document](ctx, w, scope, "get_documents", a)
}

func (w *Webhook) StoreResult(ctx context.Context, scope sandbox.CallScope, a StoreResultArgs) (store.StoredResult, error) {
	return post[store.StoredResult](ctx, w, scope, "store_result", a)
}

// Log sends the line; any 2xx answer acknowledges it.
func (w *Webhook) Log(ctx context.Context, scope sandbox.CallScope, a LogArgs) error {
	_, _, err := w.send(ctx, scope, "log", a)
	return err
}
