package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// A trial's `sandpit mcp` ended (exit 70) on a line that was not JSON, and a client that wrote
// its requests and closed its input at once got only the first answer. Now the bad line gets
// a parse error (-32700) and every request is answered before the end of input ends it.
func TestMCPStdioAnswersEveryRequest(t *testing.T) {
	daemon := &requestLog{}
	srv := httptest.NewServer(daemon)
	defer srv.Close()
	in := `not json
{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}

{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"list_code","arguments":{}}}
`
	var out, stderr strings.Builder
	code := Main(context.Background(), []string{"mcp", "--agent", "bob", "--url", srv.URL},
		Env{Stdin: strings.NewReader(in), Stdout: &out, Stderr: &stderr, Lookup: func(k string) (string, bool) {
			if k == "SANDPIT_DATA_DIR" {
				return t.TempDir(), true
			}
			return "", false
		}})
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	got := map[string]bool{}
	parseError := false
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m struct {
			ID    any `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a line of output is not JSON: %q", line)
		}
		if m.ID == nil && m.Error != nil && m.Error.Code == -32700 {
			parseError = true
			continue
		}
		got[strings.Trim(string(must(json.Marshal(m.ID))), `"`)] = true
	}
	if !parseError || !got["1"] || !got["2"] || !got["three"] {
		t.Fatalf("answers %v, parse error %v; want the parse error and answers to 1, 2 and three:\n%s", got, parseError, out.String())
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The end of input waits for what is pending, and a cancelled request is no longer pending.
func TestMCPStdioPending(t *testing.T) {
	s := newMCPStdio(strings.NewReader(`{"jsonrpc":"2.0","id":1.0,"method":"a"}`+"\n"+
		`{"jsonrpc":"2.0","id":"x","method":"b"}`+"\n"+`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}}`+"\n"), io.Discard)
	// The three lines; the end of input after them waits for request 1.
	var b []byte
	for p := make([]byte, 16); strings.Count(string(b), "\n") < 3; {
		n, err := s.Read(p)
		if err != nil {
			t.Fatalf("read %q, then %v", b, err)
		}
		b = append(b, p[:n]...)
	}
	if !s.pending["float64:1"] || len(s.pending) != 1 {
		t.Fatalf("pending %v, want only 1", s.pending)
	}
	if _, err := s.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("after the answer: %d, %v; want io.EOF", n, err)
	}
}
