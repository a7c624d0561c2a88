package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// errorCodes are the codes an error body may carry (the package documentation's list).
var errorCodes = []string{apitype.CodeInvalidRequest, apitype.CodeInvalidInput, apitype.CodeTooLarge, apitype.CodeBusy, apitype.CodeNotReady, apitype.CodeInternal,
	apitype.CodeNotFound, apitype.CodeGone, apitype.CodeConflict, apitype.CodeForbidden, apitype.CodeUnsupportedMedia, apitype.CodeMethodNotAllowed}

// checkErrorAnswer fails t unless rec is a 4xx with a JSON error body naming a known code.
func checkErrorAnswer(t *testing.T, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	if rec.Code < 400 || rec.Code > 499 {
		t.Fatalf("status %d, want 200 or a 4xx; body %q; request %q", rec.Code, rec.Body.Bytes(), body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("status %d with Content-Type %q; request %q", rec.Code, ct, body)
	}
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil {
		t.Fatalf("status %d with a body that is not an error object (%v): %q; request %q", rec.Code, err, rec.Body.Bytes(), body)
	}
	if !slices.Contains(errorCodes, e.Error.Code) || e.Error.Message == "" {
		t.Fatalf("status %d, error code %q message %q: want a known code and a message; request %q",
			rec.Code, e.Error.Code, e.Error.Message, body)
	}
}

// refExecuteBody is the documented body of POST /v1/executions, declared here on its own so
// that the fuzz target does not check the handler against the handler's own type.
type refExecuteBody struct {
	Code         string            `json:"code"`
	Input        json.RawMessage   `json:"input"`
	TimeoutMS    *int64            `json:"timeout_ms"`
	Agent        string            `json:"agent"`
	Dependencies []string          `json:"dependencies"`
	Files        []json.RawMessage `json:"files"`
	Charts       *bool             `json:"charts"`
	InlineFiles  bool              `json:"inline_files"`

	files []sandbox.InputFile // Files decoded
}

// refFile is an input file as docs/files.md documents it.
type refFile struct {
	Name     *string `json:"name"`
	Content  string  `json:"content"`
	Encoding string  `json:"encoding"`
}

// refDecodeFiles decodes the files of a body: each an object of the fields name (required),
// content and encoding (strings or null), each once and in that case; encoding "utf-8" (the
// default) or "base64" with standard padded base64.
func refDecodeFiles(raw []json.RawMessage) ([]sandbox.InputFile, error) {
	if raw == nil {
		return nil, nil
	}
	out := []sandbox.InputFile{}
	for _, r := range raw {
		seen, err := refKeys(r, "name", "content", "encoding")
		if err != nil {
			return nil, err
		}
		var f refFile
		if err := json.Unmarshal(r, &f); err != nil {
			return nil, err
		}
		if !seen["name"] {
			return nil, errors.New("no name")
		}
		name := ""
		if f.Name != nil {
			name = *f.Name
		}
		switch f.Encoding {
		case "", "utf-8":
			out = append(out, sandbox.InputFile{Name: name, Content: []byte(f.Content)})
		case "base64":
			b, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return nil, err
			}
			out = append(out, sandbox.InputFile{Name: name, Content: b})
		default:
			return nil, fmt.Errorf("encoding %q", f.Encoding)
		}
	}
	return out, nil
}

// refKeys refuses object text that is not an object, or has a key not in fields or repeated;
// it returns the keys it has.
func refKeys(object []byte, fields ...string) (map[string]bool, error) {
	trimmed := bytes.TrimSpace(object)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("not an object")
	}
	keys := json.NewDecoder(bytes.NewReader(trimmed))
	keys.Token() // {
	seen := map[string]bool{}
	for keys.More() {
		tok, err := keys.Token()
		if err != nil {
			return nil, err
		}
		k := tok.(string)
		if seen[k] || !slices.Contains(fields, k) {
			return nil, fmt.Errorf("key %q repeated or not a field", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := keys.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

// refDecodeExecute decodes body as docs/api.md says POST /v1/executions must: valid UTF-8,
// exactly one JSON object (white space around it), each key one of the fields in exactly that
// case and given once, each value of the field's type (as json.Unmarshal sees it).
func refDecodeExecute(body []byte) (refExecuteBody, error) {
	var v refExecuteBody
	if !utf8.Valid(body) {
		return v, errors.New("not UTF-8")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return v, errors.New("not an object")
	}
	if err := json.Unmarshal(body, &v); err != nil { // the whole body, as json.Unmarshal sees it
		return v, err
	}
	if _, err := refKeys(trimmed, "code", "input", "timeout_ms", "agent", "dependencies", "files", "charts", "inline_files"); err != nil {
		return v, err
	}
	var err error
	v.files, err = refDecodeFiles(v.Files)
	return v, err
}

// FuzzDecodeExecuteBody drives POST /v1/executions with arbitrary bodies: the handler never
// panics, answers 200 or a 4xx with an error body, and on 200 hands the executor exactly the
// fields json.Unmarshal reads from the body, and only for bodies the strict rules accept (and
// for all of those).
func FuzzDecodeExecuteBody(f *testing.F) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, s := range []string{
		`{"code":"print(1)","input":{"a":[1,2.5,"x",null,true]},"timeout_ms":1500,"agent":"bot-1","dependencies":["pandas>=2","rich[jupyter]"]}`,
		`{"code":"print(1)"}`,
		`{}`,
		` {"code":"x","input":null,"timeout_ms":0,"dependencies":null} `,
		`{"code":"x","dependencies":[]}`,
		`{"code":"a","code":"b"}`,
		`{"code":"a","co\u0064e":"b"}`,
		`{"Code":"x"}`,
		`{"code":"x","TIMEOUT_MS":5}`,
		`{"code":"x","dependencieſ":["a"]}`,
		`{"code":"x","\u212agent":"a"}`,
		`{"code":"x","tiemout_ms":5}`,
		`{"code":"x","input":` + deep(501) + `}`,
		`{"code":"x","input":` + deep(10001) + `}`,
		`{"code":"x","input":{"a":{"b":{"c":{"d":[[[[[{"e":1}]]]]]}}}}}`,
		"{\"code\":\"\xff\xfe\"}",
		"{\"code\":\"x\",\"input\":\"\xed\xa0\x80\"}",
		"{\"code\":\"x\"}\xff",
		`{"code":"x"} junk`,
		`{"code":"x"}{"code":"y"}`,
		`{"code":"x"} 5`,
		`{"code":"x"`,
		`{"code":"x","timeout_ms":99999999999999999999}`,
		`{"code":"x","timeout_ms":9223372036854775807}`,
		`{"code":"x","timeout_ms":-9223372036854775808}`,
		`{"code":"x","timeout_ms":1e400}`,
		`{"code":"x","timeout_ms":1e3}`,
		`{"code":"x","timeout_ms":-0}`,
		`{"code":"x","input":1e99999}`,
		`{"code":"x","input":123456789012345678901234567890}`,
		`{"code":5}`,
		`{"code":"x","agent":true}`,
		`{"code":"x","dependencies":"pandas"}`,
		`{"code":"x","dependencies":[1]}`,
		`[{"code":"x"}]`,
		`null`,
		``,
		"\ufeff{\"code\":\"x\"}",
		`{"code":"\u0000\ud800"}`,
		`{"code":"x","files":[{"name":"data.csv","content":"a,b\n1,2\n"},{"name":"img.png","content":"iVBORw0KGgo=","encoding":"base64"}],"charts":false,"inline_files":true}`,
		`{"code":"x","files":[{"name":"a","content":"x","encoding":"utf-8"}],"charts":true}`,
		`{"code":"x","files":[{"name":"a","content":"not base64!","encoding":"base64"}]}`,
		`{"code":"x","files":[{"name":"a","content":"YQ","encoding":"base64"}]}`,
		`{"code":"x","files":[{"name":"a","content":"x","encoding":"latin-1"}]}`,
		`{"code":"x","files":[{"name":"a","Name":"b"}]}`,
		`{"code":"x","files":[{"name":"a","name":"b"}]}`,
		`{"code":"x","files":[{"content":"x"}]}`,
		`{"code":"x","files":[{"name":null,"content":null,"encoding":null}]}`,
		`{"code":"x","files":[{"name":"a","contents":"x"}]}`,
		`{"code":"x","files":[null]}`,
		`{"code":"x","files":["a.csv"]}`,
		`{"code":"x","files":{"name":"a"}}`,
		`{"code":"x","files":null,"charts":null,"inline_files":false}`,
		`{"code":"x","files":[{"name":"a","content":5}]}`,
		`{"code":"x","charts":"no"}`,
		`{"code":"x","inline_files":1}`,
		`{"code":"x","files":[{"name":"../x","content":""},{"name":"/etc/passwd"},{"name":"a\u0000b"}]}`,
		"{\"code\":\"x\",\"files\":[{\"name\":\"a\",\"content\":\"\xff\"}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fake := &httpapitest.Executor{Cfg: engine.DefaultConfig(), Fn: httpapitest.Fixed(sampleResult("ok\n"), nil)}
		h := NewHandler(Backend{Executor: fake}, nil)
		req := httptest.NewRequest(http.MethodPost, "/v1/executions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		want, refErr := refDecodeExecute(body)
		got := fake.Requests()
		if rec.Code != http.StatusOK {
			checkErrorAnswer(t, rec, body)
			if len(got) != 0 {
				t.Fatalf("status %d, but the executor was called %d times; request %q", rec.Code, len(got), body)
			}
			if refErr == nil {
				t.Fatalf("status %d (%s) for a body the rules accept; request %q", rec.Code, rec.Body.Bytes(), body)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("200 for a body the rules refuse (%v); request %q", refErr, body)
		}
		if len(got) != 1 {
			t.Fatalf("200, but the executor was called %d times; request %q", len(got), body)
		}
		r := got[0]
		switch {
		case r.Code != want.Code:
			t.Fatalf("code %q, want %q; request %q", r.Code, want.Code, body)
		case !bytes.Equal(r.Input, want.Input) || (r.Input == nil) != (want.Input == nil):
			t.Fatalf("input %q, want %q; request %q", r.Input, want.Input, body)
		case (r.TimeoutMS == nil) != (want.TimeoutMS == nil) || (r.TimeoutMS != nil && *r.TimeoutMS != *want.TimeoutMS):
			t.Fatalf("timeout_ms %v, want %v; request %q", r.TimeoutMS, want.TimeoutMS, body)
		case r.Agent != want.Agent:
			t.Fatalf("agent %q, want %q; request %q", r.Agent, want.Agent, body)
		case !slices.Equal(r.Dependencies, want.Dependencies) || (r.Dependencies == nil) != (want.Dependencies == nil):
			t.Fatalf("dependencies %q, want %q; request %q", r.Dependencies, want.Dependencies, body)
		case !slices.EqualFunc(r.Files, want.files, func(a, b sandbox.InputFile) bool { return a.Name == b.Name && bytes.Equal(a.Content, b.Content) }) ||
			(r.Files == nil) != (want.files == nil):
			t.Fatalf("files %+v, want %+v; request %q", r.Files, want.files, body)
		case (r.Charts == nil) != (want.Charts == nil) || (r.Charts != nil && *r.Charts != *want.Charts):
			t.Fatalf("charts %v, want %v; request %q", r.Charts, want.Charts, body)
		case r.ID != "" || r.Origin != (sandbox.Origin{Source: sandbox.SourceAPI}) || r.CheckOutput != nil:
			t.Fatalf("fields the body cannot set: id %q origin %+v check %v; request %q", r.ID, r.Origin, r.CheckOutput != nil, body)
		}
		var res sandbox.Result
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.ID != sampleResult("").ID {
			t.Fatalf("200 with a body that is not the result (%v): %q", err, rec.Body.Bytes())
		}
	})
}

// refMemoryLine is what docs/agent-calls.md documents for a memory: {"text", "metadata"}.
type refMemoryLine struct {
	Text     string          `json:"text"`
	Metadata json.RawMessage `json:"metadata"`
}

// FuzzKnowledgeImport posts arbitrary NDJSON to POST /v1/agents/a/memories against a real
// store: the import is all or nothing. After a 4xx the agent lists no memory; after a 201 it
// lists exactly one per non-blank line, in order, with each line's text and metadata (then
// they are deleted, so that every input starts from an empty agent). Lines that are each one
// object of the documented fields with a non-blank text must be accepted. A leading byte
// order mark is dropped, as the handler does.
func FuzzKnowledgeImport(f *testing.F) {
	st, err := store.Open(f.Context(), filepath.Join(f.TempDir(), store.FileName), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	fake := &httpapitest.Executor{Cfg: engine.DefaultConfig(), Fn: httpapitest.Fixed(sampleResult("ok\n"), nil)}
	h := NewHandler(Backend{Executor: fake, Knowledge: st}, nil)
	const path = "/v1/agents/a/memories"

	for _, s := range []string{
		`{"text": "one"}`,
		`{"text": "one"}` + "\n\n" + `{"text": "two", "metadata": {"k": 1}}` + "\n",
		`{"text": "one"}` + "\n" + `{"txt": "two"}`,
		`{"text": "one"}` + "\n" + `{"text": "   "}`,
		`{"text": "one"}` + "\r\n" + `{"text": "two"}` + "\r\n",
		`{"text": "a"} {"text": "b"}`,
		`{"text": "a", "text": "b"}`,
		`{"TEXT": "a"}`,
		`{"text": "a", "metadata": null}`,
		`{"text": "a", "metadata": "s"}`,
		`{"text": "a", "metadata": [1, {"b": [2, 3e400]}]}`,
		`{"text": "a", "metadata": {"big": 123456789012345678901234567890}}`,
		`{"text": "a", "id": 7, "created_at": "2020-01-01T00:00:00Z"}`,
		`{"text": "a", "created_at": "yesterday"}`,
		`{"text": "a", "score": 1e400}`,
		"{\"text\": \"\xff\xfe\"}",
		"{\"text\": \"ok\"}\n\xff",
		`{"text": "\u0000 nul"}`,
		`{"text": "a", "metadata": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
		`{"text": "` + strings.Repeat("word ", 200) + `"}`,
		`["text"]`,
		`null`,
		"\n \n",
		`{"text": "a"`,
		`{"text": "MATCH \" OR NOT * NEAR(a b)"}`,
		"\ufeff{\"text\": \"after a byte order mark\"}\n{\"text\": \"two\"}",
		"{\"text\": \"one\"}\n\ufeff{\"text\": \"a mark inside\"}",
		"{\"text\":\"0\"}\v", // refused as "data follows the object" (CI, 6 December)
		"\v\u00a0{\"text\": \"edges\"}\u00a0\f\n\v\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", apitype.NDJSONContentType)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		listed := listAll(t, h, path)
		var lines [][]byte
		for line := range bytes.Lines(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))) {
			if line = bytes.TrimSpace(line); len(line) > 0 { // white space around a line is not its item's
				lines = append(lines, line)
			}
		}
		if rec.Code != http.StatusCreated {
			checkErrorAnswer(t, rec, body)
			if len(listed) != 0 {
				t.Fatalf("a refused import (%d %s) stored %d memories; request %q", rec.Code, rec.Body.Bytes(), len(listed), body)
			}
			if refAcceptsMemories(lines) {
				t.Fatalf("status %d (%s) for lines the rules accept; request %q", rec.Code, rec.Body.Bytes(), body)
			}
			return
		}
		var ans struct {
			Created *int `json:"created"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil || ans.Created == nil {
			t.Fatalf("201 with body %q (%v)", rec.Body.Bytes(), err)
		}
		if *ans.Created != len(lines) || len(listed) != len(lines) {
			t.Fatalf("201 created %d of %d lines, %d listed; request %q", *ans.Created, len(lines), len(listed), body)
		}
		for i, line := range lines {
			var want refMemoryLine
			if err := json.Unmarshal(line, &want); err != nil {
				t.Fatalf("201, but line %d is not an object json.Unmarshal reads (%v); request %q", i+1, err, body)
			}
			got := listed[i]
			if got.Text != want.Text {
				t.Fatalf("line %d: text %q stored as %q; request %q", i+1, want.Text, got.Text, body)
			}
			wantMeta := []byte("{}")
			if m := bytes.TrimSpace(want.Metadata); len(m) > 0 && string(m) != "null" {
				var buf bytes.Buffer
				if err := json.Compact(&buf, m); err != nil {
					t.Fatal(err)
				}
				wantMeta = buf.Bytes()
			}
			var gotMeta bytes.Buffer
			if err := json.Compact(&gotMeta, got.Metadata); err != nil || !bytes.Equal(gotMeta.Bytes(), wantMeta) {
				t.Fatalf("line %d: metadata %s stored as %s; request %q", i+1, wantMeta, got.Metadata, body)
			}
		}
		for _, m := range listed {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, fmt.Sprintf("%s/%d", path, m.ID), nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("deleting memory %d: %d %s", m.ID, rec.Code, rec.Body.Bytes())
			}
		}
		if left := listAll(t, h, path); len(left) != 0 {
			t.Fatalf("%d memories left after deleting every one", len(left))
		}
	})
}

// refAcceptsMemories reports whether each line is exactly one JSON object (white space around
// it) of only "text" (a string with a non-space character) and "metadata", each once and
// spelled so, as valid UTF-8: the import every reading of docs/agent-calls.md accepts.
func refAcceptsMemories(lines [][]byte) bool {
	if len(lines) == 0 {
		return false
	}
	for _, line := range lines {
		if !utf8.Valid(line) || sandbox.JSONDepth(line) > sandbox.MaxInputDepth+1 {
			return false
		}
		line = bytes.TrimSpace(line)
		dec := json.NewDecoder(bytes.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return false
		}
		seen := map[string]bool{}
		var text string
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return false
			}
			k := tok.(string)
			if seen[k] || (k != "text" && k != "metadata") {
				return false
			}
			seen[k] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return false
			}
			if k == "text" && json.Unmarshal(v, &text) != nil {
				return false
			}
		}
		if _, err := dec.Token(); err != nil || dec.InputOffset() != int64(len(line)) || strings.TrimSpace(text) == "" {
			return false
		}
	}
	return true
}

// listAll lists every memory under path, a page at a time.
func listAll(t *testing.T, h http.Handler, path string) []store.Memory {
	t.Helper()
	var all []store.Memory
	cursor := ""
	for {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path+"?limit=500&cursor="+url.QueryEscape(cursor), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("listing %s: %d %s", path, rec.Code, rec.Body.Bytes())
		}
		var page struct {
			Items []store.Memory `json:"items"`
			Next  string         `json:"next_cursor"`
		}
		if err := json.NewDecoder(io.Reader(rec.Body)).Decode(&page); err != nil {
			t.Fatalf("listing %s: %v", path, err)
		}
		all = append(all, page.Items...)
		if page.Next == "" {
			return all
		}
		cursor = page.Next
	}
}
