package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// denseGraph stores, for agent "a", a complete graph on n nodes ("n0" to "n<n-1>"): an edge
// of relation "r" from every node to every later one, each repeated times times.
func denseGraph(tb testing.TB, s *Store, n, times int) {
	tb.Helper()
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("n%d", i), Type: "t"}
	}
	if _, err := s.AddNodes(tb.Context(), "a", nodes); err != nil {
		tb.Fatal(err)
	}
	var edges []Edge
	for i := range n {
		for j := i + 1; j < n; j++ {
			for range times {
				edges = append(edges, Edge{Source: nodes[i].ID, Target: nodes[j].ID, Relation: "r"})
			}
		}
		if len(edges) > 20000 || i == n-1 {
			if _, err := s.AddEdges(tb.Context(), "a", edges); err != nil {
				tb.Fatal(err)
			}
			edges = edges[:0]
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNeighbourhoodDense is the hostile query_graph: depth 5, limit 1000, from a node of
// a complete graph on 300 nodes (44,850 edges); cpu-ms/op is the process's CPU per call.
func BenchmarkNeighbourhoodDense(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	denseGraph(b, s, 300, 1)
	for _, limit := range []int{1000, 100} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			began := cpuTime()
			for b.Loop() {
				g, err := s.Neighbourhood(b.Context(), GraphQuery{Agent: "a", Start: "n0", Depth: 5, Limit: limit, AnswerBytes: 4 << 20})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(g.Edges)), "edges")
				b.ReportMetric(float64(g.rows), "rows")
			}
			b.ReportMetric(float64((cpuTime()-began).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// A walk over a dense graph reads no more rows than its budget, whatever the graph holds, and
// answers the truncated shape: at most limit nodes, edges only between them, Truncated set.
func TestNeighbourhoodDenseIsBounded(t *testing.T) {
	s := open(t)
	denseGraph(t, s, 120, 3) // 21,420 edges: 357 at each node
	for _, c := range []struct {
		start       string
		depth       int
		limit, cap_ int
	}{{"n0", 5, 50, 4 << 20}, {"n0", 1, 1000, 4 << 20}, {"n5", 3, 1000, 1 << 10}, {"", 1, 100, 4 << 20}} {
		g, err := s.Neighbourhood(t.Context(), GraphQuery{Agent: "a", Start: c.start, Relation: "r", Depth: c.depth, Limit: c.limit, AnswerBytes: c.cap_})
		if err != nil {
			t.Fatal(err)
		}
		budget, maxEdges := GraphBudget(c.limit, c.cap_), GraphMaxEdges(c.limit, c.cap_)
		if g.rows > budget || len(g.Nodes) > c.limit || len(g.Edges) > maxEdges || !g.Truncated {
			t.Errorf("%+v: read %d rows (budget %d), answered %d nodes, %d edges (cap %d), truncated %v; want within the bounds, truncated",
				c, g.rows, budget, len(g.Nodes), len(g.Edges), maxEdges, g.Truncated)
		}
		in := map[string]bool{}
		for _, n := range g.Nodes {
			in[n.ID] = true
		}
		for _, e := range g.Edges {
			if !in[e.Source] || !in[e.Target] {
				t.Fatalf("%+v: edge %+v has an end outside the answer's nodes", c, e)
			}
		}
		if b, _ := json.Marshal(g); !strings.Contains(string(b), `"truncated":true`) {
			t.Errorf("%+v: the answer's JSON does not say truncated: %.200s", c, b)
		}
	}
}

// A walk within its bounds answers the whole neighbourhood, not truncated: a path a-b-c-d
// with a loop on b and parallel edges.
func TestNeighbourhoodWhole(t *testing.T) {
	s := open(t)
	if _, err := s.AddEdges(t.Context(), "a", []Edge{{Source: "a", Target: "b", Relation: "r"}, {Source: "b", Target: "b", Relation: "r"},
		{Source: "c", Target: "b", Relation: "r"}, {Source: "b", Target: "c", Relation: "r"}, {Source: "c", Target: "d", Relation: "r"},
		{Source: "a", Target: "c", Relation: "x"}}); err != nil {
		t.Fatal(err)
	}
	g, err := s.Neighbourhood(t.Context(), GraphQuery{Agent: "a", Start: "a", Relation: "r", Depth: 2, Limit: 100, AnswerBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range g.Edges {
		got = append(got, e.Source+e.Target)
	}
	if strings.Join(got, " ") != "ab bb cb bc" || g.Truncated {
		t.Fatalf("edges %v, truncated %v; want ab bb cb bc, not truncated", got, g.Truncated)
	}
	g, err = s.Neighbourhood(t.Context(), GraphQuery{Agent: "a", Start: "a", Relation: "r", Depth: 2, Limit: 2, AnswerBytes: 4 << 20})
	if err != nil || len(g.Edges) != 2 || !g.Truncated {
		t.Fatalf("limit 2: %+v, %v; want the edges a-b and b-b, truncated", g, err)
	}
}

// The agent.* calls' reads stop at their LIMIT: none sorts all the agent's rows first (which
// would make its work grow with what the agent stores).
func TestCallQueriesDoNotSortTheAgentsRows(t *testing.T) {
	s := open(t)
	if s.pg {
		t.Skip("SQLite's query plans")
	}
	for _, q := range []string{
		`SELECT id, subject, predicate, object, metadata, created_at FROM facts WHERE agent = ? ORDER BY id LIMIT ?`,
		`SELECT id, subject, predicate, object, metadata, created_at FROM facts WHERE agent = ? AND subject = ? ORDER BY id LIMIT ?`,
		`SELECT id, subject, predicate, object, metadata, created_at FROM facts WHERE agent = ? AND predicate = ? ORDER BY id LIMIT ?`,
		`SELECT id, subject, predicate, object, metadata, created_at FROM facts WHERE agent = ? AND subject = ? AND predicate = ? ORDER BY id LIMIT ?`,
		`SELECT d.id, d.title, d.content, d.metadata, d.created_at FROM documents d WHERE d.agent = ? ORDER BY d.rid DESC LIMIT ?`,
		`SELECT id FROM graph_nodes WHERE agent = ? ORDER BY rid LIMIT ?`,
	} {
		args := make([]any, strings.Count(q, "?"))
		for i := range args {
			args[i] = "x"
		}
		rows, err := s.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := collect(rows, func(r scanner) (string, error) {
			var id, parent, unused int
			var detail string
			return detail, r.Scan(&id, &parent, &unused, &detail)
		})
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(plan, "; "); strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN") {
			t.Errorf("%s\nplan: %s; want an index search in order", q, p)
		}
	}
}

// BenchmarkSearchMemoriesDense is a search whose word every memory holds: 30,000 memories of
// about 1 KiB; the ranking reads maxCandidates of them. cpu-ms/op is the process's CPU per call.
func BenchmarkSearchMemoriesDense(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	text := strings.Repeat("common words fill this memory ", 34)
	for range 3 {
		items := make([]Memory, 10000)
		for i := range items {
			items[i] = Memory{Text: fmt.Sprintf("%s %d", text, i)}
		}
		if _, err := s.AddMemories(b.Context(), "a", items); err != nil {
			b.Fatal(err)
		}
	}
	began := cpuTime()
	for b.Loop() {
		if _, err := s.SearchMemories(b.Context(), "a", "common memory", 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-began).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// sparseGraph stores, for agent "a", n nodes each with an edge to the next 3 (mod n).
func sparseGraph(tb testing.TB, s *Store, n int) {
	tb.Helper()
	nodes := make([]Node, n)
	var edges []Edge
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("n%d", i), Type: "t"}
		for d := 1; d <= 3; d++ {
			edges = append(edges, Edge{Source: nodes[i].ID, Target: fmt.Sprintf("n%d", (i+d*7)%n), Relation: "r"})
		}
	}
	if _, err := s.AddNodes(tb.Context(), "a", nodes); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.AddEdges(tb.Context(), "a", edges); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkNeighbourhoodSparse is an ordinary query_graph: depth 2 (then 3), limit 100, in a
// graph of 5,000 nodes of degree 6.
func BenchmarkNeighbourhoodSparse(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sparseGraph(b, s, 5000)
	for _, depth := range []int{2, 3} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			began := cpuTime()
			for b.Loop() {
				g, err := s.Neighbourhood(b.Context(), GraphQuery{Agent: "a", Start: "n0", Depth: depth, Limit: 100, AnswerBytes: 4 << 20})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(g.Nodes)), "nodes")
				b.ReportMetric(float64(len(g.Edges)), "edges")
			}
			b.ReportMetric(float64((cpuTime()-began).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// TestNeighbourhoodHeldToItsAnswerBytes: nodes with large properties are answered only while
// they fit the answer's bytes (an attack's nodes of 120 KiB properties built a 123 MB answer
// before it was refused), and the answer says truncated; edges only join answered nodes.
func TestNeighbourhoodHeldToItsAnswerBytes(t *testing.T) {
	s := open(t)
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 120<<10) + `"}`)
	var nodes []Node
	var edges []Edge
	for i := range 40 {
		id := fmt.Sprintf("n%02d", i)
		nodes = append(nodes, Node{ID: id, Type: "t", Properties: big})
		edges = append(edges, Edge{Source: "hub", Target: id, Relation: "r"})
	}
	nodes = append(nodes, Node{ID: "hub", Type: "t"})
	if _, err := s.AddNodes(t.Context(), "a", nodes); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddEdges(t.Context(), "a", edges); err != nil {
		t.Fatal(err)
	}
	const answerBytes = 1 << 20
	g, err := s.Neighbourhood(t.Context(), GraphQuery{Agent: "a", Start: "hub", Depth: 1, Limit: 1000, AnswerBytes: answerBytes})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(g)
	if len(b) > answerBytes+answerBytes/10 || !g.Truncated || len(g.Nodes) == 0 || len(g.Nodes) >= 41 {
		t.Fatalf("an answer of %d bytes with %d nodes, truncated %v; want at most about %d bytes, truncated", len(b), len(g.Nodes), g.Truncated, answerBytes)
	}
	in := map[string]bool{}
	for _, n := range g.Nodes {
		in[n.ID] = true
	}
	for _, e := range g.Edges {
		if !in[e.Source] || !in[e.Target] {
			t.Errorf("edge %s-%s joins a node left out", e.Source, e.Target)
		}
	}
}
