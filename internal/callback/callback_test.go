package callback_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/callback"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

func TestStoreHandlerThroughDispatch(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	if _, err := st.AddMemories(ctx, "alice", []store.Memory{{Text: "the cat sat on the mat"}, {Text: "cats and more cats: cat cat"}, {Text: "dogs only"}}); err != nil {
		t.Fatal(err)
	}
	st.AddMemories(ctx, "bob", []store.Memory{{Text: "bob's cat"}})
	st.AddNodes(ctx, "alice", []store.Node{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}})
	st.AddEdges(ctx, "alice", []store.Edge{{Source: "a", Target: "b", Relation: "r"}, {Source: "c", Target: "b", Relation: "r"}, {Source: "c", Target: "d", Relation: "other"}})
	d := callback.Dispatch{Handler: callback.Store{DB: st}}
	alice := sandbox.CallScope{Agent: "alice", ExecutionID: "ex_1"}
	call := func(method, args string) (string, error) {
		v, err := d.Call(ctx, alice, sandbox.Call{Method: method, Args: json.RawMessage(args)})
		return string(v), err
	}

	v, err := call("search_memory", `{"query": "cat \"OR\" NEAR(", "limit": 10}`)
	var mems []store.Memory
	if err != nil || json.Unmarshal([]byte(v), &mems) != nil || len(mems) != 2 || !strings.Contains(mems[0].Text, "cats and more") {
		t.Fatalf("search (FTS syntax in the query is plain text; best first; alice's only): %s %v", v, err)
	}
	// Scores come from the agent's own memories: another agent's words change nothing.
	before, _ := st.SearchMemories(ctx, "alice", "cat", 10)
	var many []store.Memory
	for range 50 {
		many = append(many, store.Memory{Text: "cat cat cat"})
	}
	st.AddMemories(ctx, "bob", many)
	after, _ := st.SearchMemories(ctx, "alice", "cat", 10)
	if len(after) != 2 || after[0].Score != before[0].Score {
		t.Fatalf("alice's scores moved when bob added memories: %v → %v", before[0].Score, after[0].Score)
	}
	// A replaced document is found by its new words only; a deleted one not at all.
	st.AddDocuments(ctx, "alice", []store.Document{{ID: "d", Title: "old", Content: "walrus"}})
	st.AddDocuments(ctx, "alice", []store.Document{{ID: "d", Title: "new", Content: "narwhal"}})
	if docs, _ := st.FindDocuments(ctx, "alice", "walrus", nil, 10); len(docs) != 0 {
		t.Fatalf("a replaced document is found by its old words: %+v", docs)
	}
	if docs, _ := st.FindDocuments(ctx, "alice", "narwhal", nil, 10); len(docs) != 1 {
		t.Fatalf("the replaced document is not found by its new words: %+v", docs)
	}
	if err := st.DeleteKnowledge(ctx, "alice", store.KindDocuments, "d"); err != nil {
		t.Fatal(err)
	}
	if docs, _ := st.FindDocuments(ctx, "alice", "narwhal", nil, 10); len(docs) != 0 {
		t.Fatalf("a deleted document is found: %+v", docs)
	}
	if m, _ := st.SearchMemories(ctx, "nobody", "cat", 10); m == nil || len(m) != 0 {
		t.Fatalf("an agent without memories: %v", m)
	}

	v, _ = call("query_graph", `{"start": "a", "relation": "r", "depth": 2, "limit": 100}`)
	var g store.Graph
	json.Unmarshal([]byte(v), &g)
	if len(g.Nodes) != 3 || len(g.Edges) != 2 {
		t.Fatalf("neighbourhood of a along r, depth 2: %s", v)
	}
	v, _ = call("query_graph", `{"start": "a", "relation": null, "depth": 1, "limit": 100}`)
	json.Unmarshal([]byte(v), &g)
	if len(g.Nodes) != 2 {
		t.Fatalf("depth 1: %s", v)
	}
	for i := range 2 {
		v, err = call("store_result", `{"key": "k", "value": {"n": `+string(rune('1'+i))+`}}`)
		if err != nil || !strings.Contains(v, `"version":`+string(rune('1'+i))) || !strings.Contains(v, `"execution_id":"ex_1"`) {
			t.Fatalf("store_result: %s %v", v, err)
		}
	}
	if h, _ := st.ResultHistory(ctx, "alice", "k"); len(h) != 2 || string(h[0].Value) != `{"n": 2}` {
		t.Fatalf("history: %+v", h)
	}
	for _, bad := range []struct{ method, args, want string }{
		{"search_memory", `{"query": "x", "limit": 0}`, "limit is 0"},
		{"search_memory", `{"query": "x", "limit": 5, "extra": 1}`, "unknown field"},
		{"query_graph", `{"depth": 9, "limit": 5}`, "depth is 9"},
		{"log", `{"message": "x", "level": "loud"}`, "level"},
		{"store_result", `{"key": "", "value": 1}`, "key"},
	} {
		if _, err := call(bad.method, bad.args); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s %s: %v", bad.method, bad.args, err)
		}
	}
}

func TestWebhookSignsAndReportsErrors(t *testing.T) {
	secret := []byte("0123456789abcdef")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(callback.SignatureHeader) != callback.Sign(secret, body) {
			w.WriteHeader(401)
			return
		}
		if strings.Contains(string(body), `"method":"get_facts"`) {
			w.WriteHeader(500)
			io.WriteString(w, `{"error": "the facts service is down"}`)
			return
		}
		io.WriteString(w, `[{"id": 1, "text": "hi"}]`)
	}))
	defer srv.Close()
	hook := &callback.Webhook{URL: srv.URL, Secret: secret}
	scope := sandbox.CallScope{Agent: "a", ExecutionID: "ex_1"}
	mems, err := hook.SearchMemory(context.Background(), scope, callback.SearchMemoryArgs{Query: "x", Limit: 1})
	if err != nil || len(mems) != 1 || mems[0].Text != "hi" {
		t.Fatalf("%+v %v", mems, err)
	}
	if _, err := hook.GetFacts(context.Background(), scope, callback.GetFactsArgs{Limit: 1}); err == nil || !strings.Contains(err.Error(), "the facts service is down") {
		t.Fatalf("error status: %v", err)
	}
	wrong := &callback.Webhook{URL: srv.URL, Secret: []byte("another-secret-key")}
	if _, err := wrong.SearchMemory(context.Background(), scope, callback.SearchMemoryArgs{Query: "x", Limit: 1}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a bad signature: %v", err)
	}
}

// Through Dispatch, the program gets the host application's answer as sent: extra fields stay,
// missing ones are not filled with zeros, an ID stays a string. An answer of the wrong shape is
// an error naming the shape.
func TestWebhookAnswersPassThrough(t *testing.T) {
	answers := map[string]string{
		"store_result":  `{"stored": true}`,
		"search_memory": `[{"id": "m-1", "text": "x", "extra": 5}]`,
		"get_facts":     `{"facts": []}`,
		"get_documents": `[1, 2]`,
		"query_graph":   `{"nodes": []}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var call struct{ Method string }
		json.NewDecoder(r.Body).Decode(&call)
		io.WriteString(w, answers[call.Method])
	}))
	defer srv.Close()
	d := callback.Dispatch{Handler: &callback.Webhook{URL: srv.URL, Secret: []byte("0123456789abcdef")}}
	call := func(method, args string) (string, error) {
		v, err := d.Call(context.Background(), sandbox.CallScope{Agent: "a", ExecutionID: "ex_1"}, sandbox.Call{Method: method, Args: json.RawMessage(args)})
		return string(v), err
	}
	for method, args := range map[string]string{
		"store_result":  `{"key": "k", "value": 1}`,
		"search_memory": `{"query": "x", "limit": 5}`,
	} {
		if got, err := call(method, args); err != nil || got != strings.ReplaceAll(answers[method], " ", "") {
			t.Errorf("%s: got %s %v; want the host's answer %s as sent", method, got, err, answers[method])
		}
	}
	for method, c := range map[string]struct{ args, want string }{
		"get_facts":     {`{"limit": 5}`, "must be a JSON array of objects"},
		"get_documents": {`{"limit": 5}`, "item 0 is not an object"},
		"query_graph":   {`{"depth": 1, "limit": 5}`, `must be {"nodes": [...], "edges": [...]}`},
	} {
		if got, err := call(method, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %s %v; want an error containing %q", method, got, err, c.want)
		}
	}
}
