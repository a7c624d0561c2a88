package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/callback"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

func importNDJSON(t *testing.T, url, path string, lines []string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, strings.NewReader(strings.Join(lines, "\n")))
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || !bytes.Contains(b, []byte(fmt.Sprintf(`"created":%d`, len(lines)))) {
		t.Fatalf("import %s: %d %s", path, resp.StatusCode, b)
	}
}

const crunch = `import pandas as pd
mems = agent.search_memory("revenue quarter", limit=500)
facts = agent.get_facts(predicate="sold", limit=1000)
df = pd.DataFrame(facts, columns=["subject", "predicate", "object"])
summary = {"memories": len(mems), "facts": len(df), "total": float(pd.to_numeric(df["object"]).sum()) if len(df) else 0.0}
stored = agent.store_result("summary", summary)
agent.log("done")
OUTPUT = {"summary": summary, "version": stored["version"], "execution": stored["execution_id"]}
`

// The callback line against the real engine, with network none: an agent's code pulls its
// memories and facts, aggregates with pandas, stores a result and logs; the result, the log
// line and the audit are read back over REST. Another agent sees none of it.
func TestCallbackLine(t *testing.T) {
	cfg := testConfig(t)
	cfg.Network = "none"
	cfg.MaxCalls = 50
	url, _ := startDaemon(t, cfg)

	var mems, facts []string
	for i := range 200 {
		topic := "weather"
		if i%4 == 0 {
			topic = "revenue for the quarter"
		}
		mems = append(mems, fmt.Sprintf(`{"text": "note %d about %s", "metadata": {"n": %d}}`, i, topic, i))
	}
	for i := range 50 {
		facts = append(facts, fmt.Sprintf(`{"subject": "store-%d", "predicate": "sold", "object": %d}`, i, i))
	}
	importNDJSON(t, url, "/v1/agents/alice/memories", mems)
	importNDJSON(t, url, "/v1/agents/alice/facts", facts)
	importNDJSON(t, url, "/v1/agents/alice/graph/nodes", []string{`{"id": "a", "type": "city"}`, `{"id": "b", "type": "city"}`, `{"id": "c", "type": "city"}`})
	importNDJSON(t, url, "/v1/agents/alice/graph/edges", []string{`{"source": "a", "target": "b", "relation": "road"}`, `{"source": "b", "target": "c", "relation": "road"}`})
	importNDJSON(t, url, "/v1/agents/alice/documents", []string{`{"id": "d1", "title": "Annual report", "content": "the revenue grew"}`})

	run := func(agent, code string) sandbox.Result {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": code, "agent": agent})
		resp, b := post(t, url, string(body))
		var res sandbox.Result
		if err := json.Unmarshal(b, &res); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return res
	}

	res := run("alice", crunch)
	var out struct {
		Summary struct {
			Memories, Facts int
			Total           float64
		}
		Version   int
		Execution string
	}
	if res.Outcome != sandbox.OutcomeOK || json.Unmarshal(res.Output, &out) != nil {
		t.Fatalf("alice: %+v", res)
	}
	if out.Summary.Memories != 50 || out.Summary.Facts != 50 || out.Summary.Total != 1225 || out.Version != 1 || out.Execution != res.ID {
		t.Fatalf("alice's summary: %+v", out)
	}
	var stored struct{ Versions []store.StoredResult }
	if st := call(t, "GET", url+"/v1/agents/alice/results/summary", "", &stored); st != 200 || len(stored.Versions) != 1 ||
		stored.Versions[0].ExecutionID != res.ID || !strings.Contains(string(stored.Versions[0].Value), `"total":1225`) {
		t.Fatalf("the stored result: %d %+v", st, stored)
	}
	var rec apitype.Execution
	call(t, "GET", url+"/v1/executions/"+res.ID, "", &rec)
	methods := []string{}
	for _, c := range rec.Calls {
		if !c.OK {
			t.Errorf("call %+v failed", c)
		}
		methods = append(methods, c.Method)
	}
	if strings.Join(methods, ",") != "search_memory,get_facts,store_result,log" || len(rec.Logs) != 1 || rec.Logs[0].Message != "done" ||
		rec.Calls[0].ResponseBytes == 0 {
		t.Fatalf("audit %+v, logs %+v", rec.Calls, rec.Logs)
	}

	// Bob runs the same script and sees none of alice's data.
	res = run("bob", crunch)
	if res.Outcome != sandbox.OutcomeOK || json.Unmarshal(res.Output, &out) != nil || out.Summary.Memories != 0 || out.Summary.Facts != 0 {
		t.Fatalf("bob: %+v", res)
	}
	if st := call(t, "GET", url+"/v1/agents/bob/memories", "", &map[string]any{}); st != 200 {
		t.Fatal(st)
	}

	// The graph, documents, docstrings and errors, from Python.
	res = run("alice", `import pydoc
g = agent.query_graph(start="a", depth=2)
docs = agent.get_documents(query="revenue")
byid = agent.get_documents(ids=["d1"])
doc = pydoc.render_doc(agent.search_memory)
errors = []
for bad in (lambda: agent.search_memory(5), lambda: agent.get_facts(limit=0), lambda: agent.store_result("k", {1, 2})):
    try:
        bad()
    except (TypeError, ValueError) as e:
        errors.append(type(e).__name__)
try:
    agent.store_result("big", "x" * (5 << 20))
except agent.Error as e:
    errors.append("agent.Error: too large" if "limit" in str(e) else str(e))
OUTPUT = {"nodes": sorted(n["id"] for n in g["nodes"]), "edges": len(g["edges"]), "docs": [d["id"] for d in docs],
          "byid": [d["title"] for d in byid], "doc": "BM25" in doc, "errors": errors,
          "is_exception": issubclass(agent.Error, Exception)}
`)
	want := `{"nodes": ["a", "b", "c"], "edges": 2, "docs": ["d1"], "byid": ["Annual report"], "doc": true, "errors": ["TypeError", "ValueError", "TypeError", "agent.Error: too large"], "is_exception": true}`
	if res.Outcome != sandbox.OutcomeOK || !bytes.Equal(compact(res.Output), compact(json.RawMessage(want))) {
		t.Fatalf("graph, documents, errors:\n got %s\nwant %s\n%s", res.Output, want, res.Stderr)
	}

	// Flooding past the cap: the 51st call raises agent.Error; the daemon is unharmed.
	res = run("alice", `n = 0
try:
    while True:
        agent.get_facts(limit=1)
        n += 1
except agent.Error as e:
    OUTPUT = {"answered": n, "error": str(e)}
`)
	if res.Outcome != sandbox.OutcomeOK || !strings.Contains(string(compact(res.Output)), `"answered":50`) || !strings.Contains(string(res.Output), "limit") {
		t.Fatalf("flood: %+v", res)
	}

	// A forged call written straight to the control line: refused, not a crash.
	res = run("alice", `import os, json
os.write(3, (json.dumps({"type": "call", "method": "drop_tables", "args": {}}) + "\n").encode())
print(os.read(3, 4096).decode())
`)
	if res.Outcome != sandbox.OutcomeOK || !strings.Contains(res.Stdout, `"ok":false`) || !strings.Contains(res.Stdout, "drop_tables") {
		t.Fatalf("forged call: %+v", res)
	}
	if st := call(t, "GET", url+"/readyz", "", &map[string]any{}); st != 200 {
		t.Fatalf("the daemon is not ready after the attacks: %d", st)
	}
}

// The webhook handler: each call is POSTed, signed, to the host application; its answers are
// the return values and its error status is agent.Error.
func TestCallbackWebhook(t *testing.T) {
	secret := "a-secret-of-sixteen-bytes"
	var calls []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(callback.SignatureHeader) != callback.Sign([]byte(secret), body) {
			http.Error(w, `{"error": "bad signature"}`, http.StatusUnauthorized)
			return
		}
		var c struct {
			Agent, ExecutionID, Method string
			Args                       map[string]any
		}
		json.Unmarshal(body, &c)
		calls = append(calls, c.Agent+":"+c.Method)
		switch c.Method {
		case "search_memory":
			fmt.Fprintf(w, `[{"id": 7, "text": "from the host about %s", "metadata": {}}]`, c.Args["query"])
		case "get_facts":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error": "facts are private"}`)
		default:
			fmt.Fprint(w, `{}`)
		}
	}))
	defer hook.Close()

	cfg := testConfig(t)
	cfg.CallbackURL, cfg.CallbackSecret = hook.URL, secret
	url, _ := startDaemon(t, cfg)
	body, _ := json.Marshal(map[string]any{"agent": "carol", "code": `m = agent.search_memory("tides")
try:
    agent.get_facts()
    err = None
except agent.Error as e:
    err = str(e)
OUTPUT = {"text": m[0]["text"], "error": err}
`})
	resp, b := post(t, url, string(body))
	var res sandbox.Result
	json.Unmarshal(b, &res)
	if resp.StatusCode != 200 || res.Outcome != sandbox.OutcomeOK ||
		!strings.Contains(string(compact(res.Output)), `"text":"from the host about tides"`) || !strings.Contains(string(res.Output), "facts are private") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if strings.Join(calls, ",") != "carol:search_memory,carol:get_facts" {
		t.Fatalf("the host saw %v", calls)
	}
}

// H30: code that stores 60 results of almost 4 MiB under one key, with the default quotas,
// gets agent.Error naming results_max_bytes before the data directory grows past the quota;
// deleting the key gives the space back to the file system.
func TestResultQuotaH30(t *testing.T) {
	cfg := testConfig(t)
	url, _ := startDaemon(t, cfg)
	// One warm-up run, so the ledger and the write-ahead log have their working size.
	if resp, b := post(t, url, `{"code": "print(1)"}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	base := treeBytes(t, cfg.DataDir)
	const fill = `stored, error = 0, None
for i in range(60):
    try:
        agent.store_result("k", "x" * (4 * 2**20 - 1024))
        stored += 1
    except agent.Error as e:
        error = str(e)
        break
OUTPUT = {"stored": stored, "error": error}
`
	body, _ := json.Marshal(map[string]any{"code": fill, "agent": "mallory", "timeout_ms": 120000})
	resp, b := post(t, url, string(body))
	var res sandbox.Result
	if err := json.Unmarshal(b, &res); err != nil || resp.StatusCode != 200 || res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var out struct {
		Stored int
		Error  string
	}
	json.Unmarshal(res.Output, &out)
	quota := cfg.ResultsMaxBytes
	if out.Stored != int(quota/(4<<20)) || !strings.Contains(out.Error, "results_max_bytes") || !strings.Contains(out.Error, "DELETE /v1/agents/mallory/results/") {
		t.Fatalf("stored %d, then %q; want %d stores, then agent.Error naming results_max_bytes and how to free space", out.Stored, out.Error, quota/(4<<20))
	}
	// The quota bounds the database; the write-ahead log adds at most a few MiB more.
	if grown := treeBytes(t, cfg.DataDir) - base; grown > quota+8<<20 {
		t.Fatalf("the data directory grew by %d bytes; the quota is %d", grown, quota)
	}
	req, _ := http.NewRequest("DELETE", url+"/v1/agents/mallory/results/k", nil)
	del, err := http.DefaultClient.Do(req)
	if err != nil || del.StatusCode != 200 {
		t.Fatalf("delete: %v %v", del, err)
	}
	del.Body.Close()
	if after := treeBytes(t, cfg.DataDir); after > base+4<<20 {
		t.Fatalf("after deleting the key the data directory is %d bytes; it was %d before the run", after, base)
	}
}

// treeBytes adds up the sizes of the regular files under dir.
func treeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
