package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The knowledge an agent's code reads through the callback line, and what it writes back.
// Every item belongs to one agent; no query crosses agents. The JSON field names are those of
// the agent.* calls' answers (the REST API answers apitype's items, of the same fields).

// Memory is a remembered piece of text, found by full-text search.
type Memory struct {
	ID        int64           `json:"id"`
	Text      string          `json:"text"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	// Score is the search rank (higher is better; from FTS5's bm25), only in search answers.
	Score float64 `json:"score,omitempty"`
}

// Fact is a subject–predicate–object triple; Object is any JSON value.
type Fact struct {
	ID        int64           `json:"id"`
	Subject   string          `json:"subject"`
	Predicate string          `json:"predicate"`
	Object    json.RawMessage `json:"object"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
}

// Node is a node of the agent's knowledge graph, identified by the agent's own ID.
type Node struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
	CreatedAt  time.Time       `json:"created_at"`
}

// Edge is a directed, typed edge between two nodes (which need not exist).
type Edge struct {
	ID         int64           `json:"id"`
	Source     string          `json:"source"`
	Target     string          `json:"target"`
	Relation   string          `json:"relation"`
	Properties json.RawMessage `json:"properties"`
	CreatedAt  time.Time       `json:"created_at"`
}

// Graph is part of the knowledge graph.
type Graph struct {
	Nodes []Node `json:"nodes"`
	Edges []Edge `json:"edges"`
	// Truncated says the walk left out nodes or edges it would otherwise have answered (see
	// Neighbourhood).
	Truncated bool `json:"truncated"`
	// rows is how many edge rows the walk read (its work, for tests).
	rows int
}

// Document is a text document with a title, identified by the agent's own ID.
type Document struct {
	ID        string          `json:"id"`
	Title     string          `json:"title"`
	Content   string          `json:"content"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	Score     float64         `json:"score,omitempty"`
}

// StoredResult is one version of a value stored under a key by a run (or a client).
type StoredResult struct {
	Key         string          `json:"key"`
	Version     int             `json:"version"`
	Value       json.RawMessage `json:"value,omitempty"`
	ExecutionID string          `json:"execution_id,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

// jsonOr returns v's text, or def when v is absent or null.
func jsonOr(v json.RawMessage, def string) string {
	if t := strings.TrimSpace(string(v)); t != "" && t != "null" {
		return t
	}
	return def
}

// AddMemories stores memories of agent in one transaction and returns them with their IDs.
func (s *Store) AddMemories(ctx context.Context, agent string, items []Memory) ([]Memory, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	err := s.tx(ctx, func(tx *Tx) error {
		for i := range items {
			items[i].CreatedAt, items[i].Metadata = now, json.RawMessage(jsonOr(items[i].Metadata, "{}"))
			q, args := `INSERT INTO memories (agent, text, metadata, created_at, tokens) VALUES (?, ?, ?, ?, ?) RETURNING id`,
				[]any{agent, items[i].Text, string(items[i].Metadata), now.UnixMilli(), len(tokens(items[i].Text))}
			if s.pg {
				q = `INSERT INTO memories (agent, text, metadata, created_at, tokens, words) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`
				args = append(args, indexWords(items[i].Text))
			}
			if err := tx.QueryRowContext(ctx, q, args...).Scan(&items[i].ID); err != nil {
				return err
			}
		}
		return nil
	})
	return items, err
}

// SearchMemories returns the agent's memories matching any word of text, best first (BM25
// from the agent's own memories; see rank.go).
func (s *Store) SearchMemories(ctx context.Context, agent, text string, limit int) ([]Memory, error) {
	words := queryWords(text)
	if len(words) == 0 {
		return []Memory{}, nil
	}
	ids, scores, err := s.search(ctx, "memories", agent, words, limit)
	if err != nil || len(ids) == 0 {
		return []Memory{}, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, text, metadata, created_at FROM memories WHERE agent = ? AND id IN (`+placeholders(len(ids))+`)`,
		append([]any{agent}, anyInts(ids)...)...)
	if err != nil {
		return nil, err
	}
	found, err := collect(rows, scanMemory)
	if err != nil {
		return nil, err
	}
	for i := range found {
		found[i].Score = scores[found[i].ID]
	}
	return inOrder(found, ids, func(m Memory) int64 { return m.ID }), nil
}

// queryWords returns the words of a query (at most 64).
func queryWords(text string) []string {
	words := tokens(text)
	if len(words) > 64 {
		words = words[:64]
	}
	return words
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func anyInts(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// inOrder returns items in the order of ids.
func inOrder[T any](items []T, ids []int64, key func(T) int64) []T {
	pos := make(map[int64]int, len(ids))
	for i, id := range ids {
		pos[id] = i
	}
	sort.SliceStable(items, func(i, j int) bool { return pos[key(items[i])] < pos[key(items[j])] })
	return items
}

// AddFacts stores facts of agent in one transaction.
func (s *Store) AddFacts(ctx context.Context, agent string, items []Fact) ([]Fact, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	err := s.tx(ctx, func(tx *Tx) error {
		for i := range items {
			f := &items[i]
			f.CreatedAt, f.Metadata, f.Object = now, json.RawMessage(jsonOr(f.Metadata, "{}")), json.RawMessage(jsonOr(f.Object, "null"))
			if err := tx.QueryRowContext(ctx, `INSERT INTO facts (agent, subject, predicate, object, metadata, created_at)
				VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, agent, f.Subject, f.Predicate, string(f.Object), string(f.Metadata),
				now.UnixMilli()).Scan(&f.ID); err != nil {
				return err
			}
		}
		return nil
	})
	return items, err
}

// QueryFacts returns the agent's facts with the given subject and predicate (each "" for any).
func (s *Store) QueryFacts(ctx context.Context, agent, subject, predicate string, limit int) ([]Fact, error) {
	q := `SELECT id, subject, predicate, object, metadata, created_at FROM facts WHERE agent = ?`
	args := []any{agent}
	if subject != "" {
		q += " AND subject = ?"
		args = append(args, subject)
	}
	if predicate != "" {
		q += " AND predicate = ?"
		args = append(args, predicate)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY id LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanFact)
}

func scanFact(r scanner) (Fact, error) {
	var f Fact
	var obj, meta string
	var created int64
	err := r.Scan(&f.ID, &f.Subject, &f.Predicate, &obj, &meta, &created)
	f.Object, f.Metadata, f.CreatedAt = json.RawMessage(obj), json.RawMessage(meta), time.UnixMilli(created).UTC()
	return f, err
}

// AddNodes stores nodes of agent, replacing nodes with the same ID.
func (s *Store) AddNodes(ctx context.Context, agent string, items []Node) ([]Node, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	err := s.tx(ctx, func(tx *Tx) error {
		for i := range items {
			n := &items[i]
			n.CreatedAt, n.Properties = now, json.RawMessage(jsonOr(n.Properties, "{}"))
			// A replaced node keeps the time it was first stored: answer that one.
			var created int64
			if err := tx.QueryRowContext(ctx, `INSERT INTO graph_nodes (agent, id, type, properties, created_at) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (agent, id) DO UPDATE SET type = excluded.type, properties = excluded.properties RETURNING created_at`,
				agent, n.ID, n.Type, string(n.Properties), now.UnixMilli()).Scan(&created); err != nil {
				return err
			}
			n.CreatedAt = time.UnixMilli(created).UTC()
		}
		return nil
	})
	return items, err
}

// AddEdges stores edges of agent.
func (s *Store) AddEdges(ctx context.Context, agent string, items []Edge) ([]Edge, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	err := s.tx(ctx, func(tx *Tx) error {
		for i := range items {
			e := &items[i]
			e.CreatedAt, e.Properties = now, json.RawMessage(jsonOr(e.Properties, "{}"))
			if err := tx.QueryRowContext(ctx, `INSERT INTO graph_edges (agent, source, target, relation, properties, created_at)
				VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, agent, e.Source, e.Target, e.Relation, string(e.Properties),
				now.UnixMilli()).Scan(&e.ID); err != nil {
				return err
			}
		}
		return nil
	})
	return items, err
}

// The work of one Neighbourhood is bounded before it is done, whatever the agent's graph
// holds: a walk reads at most GraphBudget rows of graph_edges (each edge read from one of its
// ends is a row) and answers at most GraphMaxEdges edges; a walk that reaches either stops
// there and says so (Graph.Truncated).
const (
	// graphEdgesPerNode is how many edges an answer may carry per node of its limit.
	graphEdgesPerNode = 10
	// graphMinEdgeBytes is the least JSON an edge takes in an answer (its id, ends, relation,
	// properties and created_at): an answer of answerBytes has room for no more edges than
	// answerBytes / graphMinEdgeBytes.
	graphMinEdgeBytes = 100
	// graphRowsPerItem is how many edge rows a walk may read per node or edge it may answer.
	graphRowsPerItem = 2
)

// GraphMaxEdges is how many edges a Neighbourhood of limit nodes answers at most: 10 per node,
// and no more than an answer of answerBytes (0: no such cap) has room for.
func GraphMaxEdges(limit, answerBytes int) int {
	n := graphEdgesPerNode * limit
	if answerBytes > 0 {
		n = min(n, max(1, answerBytes/graphMinEdgeBytes))
	}
	return n
}

// GraphBudget is how many edge rows a Neighbourhood of limit nodes reads at most:
// 2 × (limit + GraphMaxEdges).
func GraphBudget(limit, answerBytes int) int {
	return graphRowsPerItem * (limit + GraphMaxEdges(limit, answerBytes))
}

// GraphQuery asks Neighbourhood for a part of an agent's graph.
type GraphQuery struct {
	Agent string
	// Start is the node the walk begins at; "" asks for any Limit nodes and their edges.
	Start string
	// Relation, when not "", is the only relation whose edges are followed and answered.
	Relation string
	// Depth is how many edges away from Start the walk goes (either way along an edge).
	Depth int
	// Limit is how many nodes the answer holds at most.
	Limit int
	// AnswerBytes is the caller's cap on the answer's JSON (0: none); it bounds the walk too.
	AnswerBytes int
}

// Neighbourhood returns q.Agent's graph around q.Start: the nodes up to q.Depth edges away
// (following edges either way, only those of q.Relation when it is not ""), at most q.Limit
// nodes, and the edges between them. With Start "", any Limit nodes and their edges.
//
// The walk reads at most GraphBudget(q.Limit, q.AnswerBytes) edge rows and answers at most
// GraphMaxEdges(q.Limit, q.AnswerBytes) edges. When it leaves out a node or an edge it would
// otherwise answer (limit reached, budget spent, edges over their cap, bytes over
// q.AnswerBytes), the answer has Truncated set: what it holds is still a subgraph, nodes in the
// order they were reached and edges between answered nodes.
func (s *Store) Neighbourhood(ctx context.Context, q GraphQuery) (Graph, error) {
	w := &graphWalk{s: s, q: q, g: Graph{Nodes: []Node{}, Edges: []Edge{}}, seen: map[string]bool{}, keep: map[int64]bool{}}
	if err := w.begin(ctx); err != nil {
		return Graph{}, err
	}
	if err := w.walk(ctx); err != nil {
		return Graph{}, err
	}
	if len(w.ids) == 0 {
		return w.g, nil
	}
	answered, err := w.answerNodes(ctx)
	if err != nil {
		return Graph{}, err
	}
	if err := w.answerEdges(ctx, answered); err != nil {
		return Graph{}, err
	}
	return w.g, nil
}

// graphWalk is the state of one Neighbourhood.
type graphWalk struct {
	s *Store
	q GraphQuery
	g Graph
	// ids are the nodes reached, in the order they were reached; seen holds the same.
	ids  []string
	seen map[string]bool
	// depth is how far the walk goes: q.Depth, or 0 when it begins at any nodes.
	depth int
	// keep holds the edges read between nodes reached.
	keep map[int64]bool
	// used is the answer's bytes so far.
	used int
}

// begin sets the nodes the walk begins at: q.Start, or the agent's first Limit nodes (and then
// a depth of 0: their edges are read, no node is added).
func (w *graphWalk) begin(ctx context.Context) error {
	if w.q.Start != "" {
		w.seen[w.q.Start], w.ids, w.depth = true, []string{w.q.Start}, w.q.Depth
		return nil
	}
	rows, err := w.s.r.QueryContext(ctx, `SELECT id FROM graph_nodes WHERE agent = ? ORDER BY rid LIMIT ?`, w.q.Agent, w.q.Limit+1)
	if err != nil {
		return err
	}
	ids, err := collect(rows, func(r scanner) (string, error) { var id string; return id, r.Scan(&id) })
	if err != nil {
		return err
	}
	if len(ids) > w.q.Limit {
		ids, w.g.Truncated = ids[:w.q.Limit], true
	}
	for _, id := range ids {
		w.seen[id] = true
	}
	w.ids, w.depth = ids, 0
	return nil
}

// graphIncident is an edge read from one of its ends: its id and the node at its other end.
type graphIncident struct {
	edge  int64
	other string
}

// walk reads the nodes' edges breadth first, within the budget of rows: ids[next] is the next
// node whose edges are read; the nodes before end are at level, those after at level+1. A node
// below depth adds its unseen neighbours (up to Limit); every node's edges to nodes reached
// are kept.
func (w *graphWalk) walk(ctx context.Context) error {
	budget := GraphBudget(w.q.Limit, w.q.AnswerBytes)
	for next, end, level := 0, len(w.ids), 0; next < len(w.ids); next++ {
		if next == end {
			end, level = len(w.ids), level+1
		}
		left := budget - w.g.rows
		if left <= 0 {
			w.g.Truncated = true
			return nil
		}
		found, err := w.incident(ctx, w.ids[next], left+1)
		if err != nil {
			return err
		}
		if len(found) > left {
			found, w.g.Truncated = found[:left], true
		}
		w.g.rows += len(found)
		for _, e := range found {
			if !w.seen[e.other] && level < w.depth {
				if len(w.ids) < w.q.Limit {
					w.seen[e.other] = true
					w.ids = append(w.ids, e.other)
				} else {
					w.g.Truncated = true
				}
			}
			if w.seen[e.other] {
				w.keep[e.edge] = true
			}
		}
	}
	return nil
}

// incident reads up to limit edges of node (of q.Relation when it is not ""), from either end.
func (w *graphWalk) incident(ctx context.Context, node string, limit int) ([]graphIncident, error) {
	rel := relFilter(w.q.Relation)
	q := `SELECT id, target FROM graph_edges WHERE agent = ? AND source = ?` + rel +
		` UNION ALL SELECT id, source FROM graph_edges WHERE agent = ? AND target = ?` + rel + ` LIMIT ?`
	end := []any{w.q.Agent, node}
	if w.q.Relation != "" {
		end = append(end, w.q.Relation)
	}
	args := append(append(slices.Clone(end), end...), limit)
	rows, err := w.s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (graphIncident, error) { var e graphIncident; return e, r.Scan(&e.edge, &e.other) })
}

// fits adds n bytes to the answer and says whether it is still within q.AnswerBytes. Bytes are
// counted, not only items: nodes of 120 KiB properties built a 123 MB answer before it was
// refused.
func (w *graphWalk) fits(n int) bool {
	w.used += n
	return w.q.AnswerBytes <= 0 || w.used <= w.q.AnswerBytes
}

// answerNodes reads the nodes reached into the answer while their bytes fit, and returns the
// nodes whose edges may be answered: every node reached (a node may have edges and no row of
// its own), or only those answered when some were left out for the bytes.
func (w *graphWalk) answerNodes(ctx context.Context) (map[string]bool, error) {
	args := []any{w.q.Agent}
	for _, id := range w.ids {
		args = append(args, id)
	}
	rows, err := w.s.r.QueryContext(ctx, `SELECT id, type, properties, created_at FROM graph_nodes WHERE agent = ? AND id IN (`+placeholders(len(w.ids))+`)`, args...)
	if err != nil {
		return nil, err
	}
	full := false
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		if !w.fits(len(n.ID) + len(n.Type) + len(n.Properties) + 64) {
			w.g.Truncated, full = true, true
			break
		}
		w.g.Nodes = append(w.g.Nodes, n)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	answered := map[string]bool{}
	if full {
		for _, n := range w.g.Nodes {
			answered[n.ID] = true
		}
	} else {
		for _, id := range w.ids {
			answered[id] = true
		}
	}
	return answered, nil
}

// answerEdges reads the edges kept, in id order and at most GraphMaxEdges of them, into the
// answer: those whose ends are both answered, while their bytes fit.
func (w *graphWalk) answerEdges(ctx context.Context, answered map[string]bool) error {
	edges := make([]int64, 0, len(w.keep))
	for id := range w.keep {
		edges = append(edges, id)
	}
	slices.Sort(edges)
	if maxEdges := GraphMaxEdges(w.q.Limit, w.q.AnswerBytes); len(edges) > maxEdges {
		edges, w.g.Truncated = edges[:maxEdges], true
	}
	for chunk := range slices.Chunk(edges, 500) {
		rows, err := w.s.r.QueryContext(ctx, `SELECT id, source, target, relation, properties, created_at FROM graph_edges WHERE agent = ? AND id IN (`+
			placeholders(len(chunk))+`) ORDER BY id`, append([]any{w.q.Agent}, anyInts(chunk)...)...)
		if err != nil {
			return err
		}
		part, err := collect(rows, scanEdge)
		if err != nil {
			return err
		}
		for _, e := range part {
			if !answered[e.Source] || !answered[e.Target] {
				w.g.Truncated = true // an end of it was left out for the bytes
				continue
			}
			if !w.fits(len(e.Source) + len(e.Target) + len(e.Relation) + len(e.Properties) + 96) {
				w.g.Truncated = true
				return nil
			}
			w.g.Edges = append(w.g.Edges, e)
		}
	}
	return nil
}

func relFilter(relation string) string {
	if relation == "" {
		return ""
	}
	return " AND relation = ?"
}

func scanNode(r scanner) (Node, error) {
	var n Node
	var props string
	var created int64
	err := r.Scan(&n.ID, &n.Type, &props, &created)
	n.Properties, n.CreatedAt = json.RawMessage(props), time.UnixMilli(created).UTC()
	return n, err
}

func scanEdge(r scanner) (Edge, error) {
	var e Edge
	var props string
	var created int64
	err := r.Scan(&e.ID, &e.Source, &e.Target, &e.Relation, &props, &created)
	e.Properties, e.CreatedAt = json.RawMessage(props), time.UnixMilli(created).UTC()
	return e, err
}

// AddDocuments stores documents of agent, replacing documents with the same ID.
func (s *Store) AddDocuments(ctx context.Context, agent string, items []Document) ([]Document, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	err := s.tx(ctx, func(tx *Tx) error {
		for i := range items {
			d := &items[i]
			d.CreatedAt, d.Metadata = now, json.RawMessage(jsonOr(d.Metadata, "{}"))
			// A replaced document keeps the time it was first stored: answer that one.
			var created int64
			q, args := `INSERT INTO documents (agent, id, title, content, metadata, created_at, tokens) VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (agent, id) DO UPDATE SET title = excluded.title, content = excluded.content, metadata = excluded.metadata,
				tokens = excluded.tokens RETURNING created_at`, []any{agent, d.ID, d.Title, d.Content, string(d.Metadata), now.UnixMilli(),
				len(tokens(d.Title + " " + d.Content))}
			if s.pg {
				q = `INSERT INTO documents (agent, id, title, content, metadata, created_at, tokens, words) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (agent, id) DO UPDATE SET title = excluded.title, content = excluded.content, metadata = excluded.metadata,
				tokens = excluded.tokens, words = excluded.words RETURNING created_at`
				args = append(args, indexWords(d.Title+" "+d.Content))
			}
			if err := tx.QueryRowContext(ctx, q, args...).Scan(&created); err != nil {
				return err
			}
			d.CreatedAt = time.UnixMilli(created).UTC()
		}
		return nil
	})
	return items, err
}

// FindDocuments returns the agent's documents matching text (best first), or with the given
// IDs, or the newest when both are empty.
func (s *Store) FindDocuments(ctx context.Context, agent, text string, ids []string, limit int) ([]Document, error) {
	const cols = `d.id, d.title, d.content, d.metadata, d.created_at`
	var rows *sql.Rows
	var err error
	switch {
	case text != "":
		words := queryWords(text)
		if len(words) == 0 {
			return []Document{}, nil
		}
		rids, scores, err := s.search(ctx, "documents", agent, words, limit)
		if err != nil || len(rids) == 0 {
			return []Document{}, err
		}
		rows, err := s.r.QueryContext(ctx, `SELECT d.rid, `+cols+` FROM documents d WHERE d.agent = ? AND d.rid IN (`+placeholders(len(rids))+`)`,
			append([]any{agent}, anyInts(rids)...)...)
		if err != nil {
			return nil, err
		}
		type ranked struct {
			rid int64
			doc Document
		}
		found, err := collect(rows, func(r scanner) (ranked, error) {
			var x ranked
			var err error
			x.doc, err = scanDocument(prefixed{r, &x.rid})
			x.doc.Score = scores[x.rid]
			return x, err
		})
		if err != nil {
			return nil, err
		}
		docs := []Document{}
		for _, x := range inOrder(found, rids, func(x ranked) int64 { return x.rid }) {
			docs = append(docs, x.doc)
		}
		return docs, nil
	case len(ids) > 0:
		if len(ids) > 1000 {
			ids = ids[:1000]
		}
		args := []any{agent}
		for _, id := range ids {
			args = append(args, id)
		}
		rows, err = s.r.QueryContext(ctx, `SELECT `+cols+` FROM documents d WHERE d.agent = ? AND d.id IN (`+
			placeholders(len(ids))+`) ORDER BY d.rid LIMIT ?`, append(args, limit)...)
	default:
		rows, err = s.r.QueryContext(ctx, `SELECT `+cols+` FROM documents d WHERE d.agent = ? ORDER BY d.rid DESC LIMIT ?`, agent, limit)
	}
	if err != nil {
		return nil, err
	}
	return collect(rows, scanDocument)
}

// scanMemory reads id, text, metadata, created_at.
func scanMemory(r scanner) (Memory, error) {
	var m Memory
	var meta string
	var created int64
	err := r.Scan(&m.ID, &m.Text, &meta, &created)
	m.Metadata, m.CreatedAt = json.RawMessage(meta), time.UnixMilli(created).UTC()
	return m, err
}

// scanDocument reads id, title, content, metadata, created_at.
func scanDocument(r scanner) (Document, error) {
	var d Document
	var meta string
	var created int64
	err := r.Scan(&d.ID, &d.Title, &d.Content, &meta, &created)
	d.Metadata, d.CreatedAt = json.RawMessage(meta), time.UnixMilli(created).UTC()
	return d, err
}

// StoreResult stores value under the agent's key as its next version, linked to executionID
// (may be ""), and returns the stored version without its value. A *QuotaError means the
// agent's quotas (SetQuotas) leave no room for it; nothing is stored then.
func (s *Store) StoreResult(ctx context.Context, agent, key string, value json.RawMessage, executionID string) (StoredResult, error) {
	stored, err := s.StoreResults(ctx, agent, []StoredResult{{Key: key, Value: value, ExecutionID: executionID}})
	if err != nil {
		return StoredResult{}, err
	}
	return stored[0], nil
}

// StoreResults stores each item's Value under its Key (with its ExecutionID, may be "") as the
// key's next version, all in one transaction: all or none. It returns the stored versions
// without their values; a *QuotaError when the agent's quotas leave no room for them all.
func (s *Store) StoreResults(ctx context.Context, agent string, items []StoredResult) ([]StoredResult, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	out := make([]StoredResult, len(items))
	err := s.tx(ctx, func(tx *Tx) error {
		for i, it := range items {
			text := jsonOr(it.Value, "null")
			size := resultBytes(agent, it.Key, text, it.ExecutionID)
			if err := s.checkResultQuota(ctx, tx, agent, it.Key, size); err != nil {
				return err
			}
			out[i] = StoredResult{Key: it.Key, ExecutionID: it.ExecutionID, CreatedAt: now}
			if err := tx.QueryRowContext(ctx, `INSERT INTO results (agent, key, version, value, execution_id, created_at, bytes)
				VALUES (?, ?, (SELECT coalesce(max(version), 0) + 1 FROM results WHERE agent = ? AND key = ?), ?, ?, ?, ?) RETURNING version`,
				agent, it.Key, agent, it.Key, text, nullString(it.ExecutionID), now.UnixMilli(), size).Scan(&out[i].Version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// resultOverheadBytes is what a stored result takes besides its text columns: the row's header
// and integer columns, and its entries' own overhead in the table's two indexes.
const resultOverheadBytes = 96

// resultBytes is what a result counts against results_max_bytes: what the table and its
// indexes hold for it (its agent in the row and both indexes, its key in the row and the
// unique index, its value and execution once, and resultOverheadBytes). Counted as key and
// value alone, results of one byte filled the table to 10 times the quota and more. The
// migrations that recount old results use the same sum (00016_result_bytes_stored.sql).
func resultBytes(agent, key, value, executionID string) int64 {
	return int64(resultOverheadBytes + 3*len(agent) + 2*len(key) + len(value) + len(executionID))
}

// ResultHistory returns every version of the agent's key, newest first.
func (s *Store) ResultHistory(ctx context.Context, agent, key string) ([]StoredResult, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key, version, value, execution_id, created_at FROM results
		WHERE agent = ? AND key = ? ORDER BY version DESC`, agent, key)
	if err != nil {
		return nil, err
	}
	list, err := collect(rows, scanResult)
	if err == nil && len(list) == 0 {
		err = fmt.Errorf("result %q: %w", key, ErrNotFound)
	}
	return list, err
}

func scanResult(r scanner) (StoredResult, error) {
	var res StoredResult
	var value string
	var exec sql.NullString
	var created int64
	err := r.Scan(&res.Key, &res.Version, &value, &exec, &created)
	res.Value, res.ExecutionID, res.CreatedAt = json.RawMessage(value), exec.String, time.UnixMilli(created).UTC()
	return res, err
}

// executionLogs returns the log lines of an execution, in order.
func (s *Store) executionLogs(ctx context.Context, executionID string) ([]sandbox.LogLine, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT level, message, created_at FROM execution_logs WHERE execution_id = ? ORDER BY id`, executionID)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (sandbox.LogLine, error) {
		var l sandbox.LogLine
		var created int64
		err := r.Scan(&l.Level, &l.Message, &created)
		l.CreatedAt = time.UnixMilli(created).UTC()
		return l, err
	})
}

func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	list := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	return list, rows.Err()
}

// ---- listing and deleting, for the REST API ----

// Kind names a kind of knowledge item in the API: memories, facts, documents, nodes, edges,
// results.
type Kind string

// The kinds of knowledge.
const (
	KindMemories  Kind = "memories"
	KindFacts     Kind = "facts"
	KindDocuments Kind = "documents"
	KindNodes     Kind = "nodes"
	KindEdges     Kind = "edges"
	KindResults   Kind = "results"
)

// Kinds lists the kinds.
var Kinds = []Kind{KindMemories, KindFacts, KindDocuments, KindNodes, KindEdges, KindResults}

type kindTable struct {
	table, order, key, cols string
	numeric                 bool // the key is an integer
	scan                    func(scanner) (any, error)
}

var kindTables = map[Kind]kindTable{
	KindMemories:  {"memories", "id", "id", "id, text, metadata, created_at", true, func(r scanner) (any, error) { return scanMemory(r) }},
	KindFacts:     {"facts", "id", "id", "id, subject, predicate, object, metadata, created_at", true, func(r scanner) (any, error) { return scanFact(r) }},
	KindDocuments: {"documents", "rid", "id", "id, title, content, metadata, created_at", false, func(r scanner) (any, error) { return scanDocument(r) }},
	KindNodes:     {"graph_nodes", "rid", "id", "id, type, properties, created_at", false, func(r scanner) (any, error) { return scanNode(r) }},
	KindEdges:     {"graph_edges", "id", "id", "id, source, target, relation, properties, created_at", true, func(r scanner) (any, error) { return scanEdge(r) }},
	KindResults:   {"results", "id", "key", "key, version, value, execution_id, created_at", false, func(r scanner) (any, error) { return scanResult(r) }},
}

// ErrUnknownKind means a kind that is not one of Kinds.
var ErrUnknownKind = errors.New("unknown kind: use memories, facts, documents, nodes, edges or results")

// ListKnowledge returns a page of the agent's items of kind, oldest first (results: the latest
// version of each key).
func (s *Store) ListKnowledge(ctx context.Context, agent string, kind Kind, p Page) ([]any, string, error) {
	kt, ok := kindTables[kind]
	if !ok {
		return nil, "", ErrUnknownKind
	}
	var after int64
	if p.Cursor != "" {
		var err error
		if after, _, err = decodeCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	where := "agent = ? AND " + kt.order + " > ?"
	if kind == KindResults {
		where += " AND version = (SELECT max(version) FROM results r2 WHERE r2.agent = results.agent AND r2.key = results.key)"
	}
	limit := p.limit()
	rows, err := s.r.QueryContext(ctx, `SELECT `+kt.order+`, `+kt.cols+` FROM `+kt.table+` WHERE `+where+
		` ORDER BY `+kt.order+` LIMIT ?`, agent, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	type row struct {
		order int64
		item  any
	}
	list, err := collect(rows, func(r scanner) (row, error) {
		var o int64
		item, err := kt.scan(prefixed{r, &o})
		return row{o, item}, err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = encodeCursor(list[limit-1].order, "")
	}
	items := make([]any, len(list))
	for i, r := range list {
		items[i] = r.item
	}
	return items, next, nil
}

// prefixed scans one leading column into order, then the rest with the wrapped scanner.
type prefixed struct {
	r     scanner
	order *int64
}

func (p prefixed) Scan(dest ...any) error { return p.r.Scan(append([]any{p.order}, dest...)...) }

// GetKnowledge returns the agent's item of kind with key id (results: every version).
func (s *Store) GetKnowledge(ctx context.Context, agent string, kind Kind, id string) (any, error) {
	kt, ok := kindTables[kind]
	if !ok {
		return nil, ErrUnknownKind
	}
	if kind == KindResults {
		return s.ResultHistory(ctx, agent, id)
	}
	key, err := kindKey(kt, id)
	if err != nil {
		return nil, err
	}
	item, err := kt.scan(s.r.QueryRowContext(ctx, `SELECT `+kt.cols+` FROM `+kt.table+` WHERE agent = ? AND `+kt.key+` = ?`, agent, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %q: %w", kindNames[kind], id, ErrNotFound)
	}
	return item, err
}

// DeleteKnowledge deletes the agent's item of kind with key id (results: every version), and
// gives the space it took back to the file system.
func (s *Store) DeleteKnowledge(ctx context.Context, agent string, kind Kind, id string) error {
	kt, ok := kindTables[kind]
	if !ok {
		return ErrUnknownKind
	}
	key, err := kindKey(kt, id)
	if err != nil {
		return err
	}
	r, err := s.w.ExecContext(ctx, `DELETE FROM `+kt.table+` WHERE agent = ? AND `+kt.key+` = ?`, agent, key)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %q: %w", kindNames[kind], id, ErrNotFound)
	}
	s.reclaim(ctx)
	return nil
}

// kindNames are the singular names of the kinds, for messages.
var kindNames = map[Kind]string{KindMemories: "memory", KindFacts: "fact", KindDocuments: "document",
	KindNodes: "node", KindEdges: "edge", KindResults: "result"}

func kindKey(kt kindTable, id string) (any, error) {
	if !kt.numeric {
		return id, nil
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%q: %w (these IDs are numbers)", id, ErrNotFound)
	}
	return n, nil
}
