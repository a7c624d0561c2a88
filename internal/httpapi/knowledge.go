package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Knowledge is what the API needs of the knowledge store; *store.Store satisfies it.
type Knowledge interface {
	AddMemories(ctx context.Context, agent string, items []store.Memory) ([]store.Memory, error)
	AddFacts(ctx context.Context, agent string, items []store.Fact) ([]store.Fact, error)
	AddNodes(ctx context.Context, agent string, items []store.Node) ([]store.Node, error)
	AddEdges(ctx context.Context, agent string, items []store.Edge) ([]store.Edge, error)
	AddDocuments(ctx context.Context, agent string, items []store.Document) ([]store.Document, error)
	StoreResults(ctx context.Context, agent string, items []store.StoredResult) ([]store.StoredResult, error)
	ListKnowledge(ctx context.Context, agent string, kind store.Kind, p store.Page) ([]any, string, error)
	GetKnowledge(ctx context.Context, agent string, kind store.Kind, id string) (any, error)
	DeleteKnowledge(ctx context.Context, agent string, kind store.Kind, id string) error
	// Quotas are the limits on what each agent may store, listed by GET /v1/limits.
	Quotas() store.Quotas
}

var _ Knowledge = (*store.Store)(nil)

// knowledgePaths maps each kind to its path under /v1/agents/{agent}/.
var knowledgePaths = map[store.Kind]string{
	store.KindMemories:  "memories",
	store.KindFacts:     "facts",
	store.KindDocuments: "documents",
	store.KindNodes:     "graph/nodes",
	store.KindEdges:     "graph/edges",
	store.KindResults:   "results",
}

// maxImportBytes bounds a knowledge request body (an NDJSON import may be large).
const maxImportBytes = 64 << 20

func (a *api) routeKnowledge() {
	for kind, path := range knowledgePaths {
		base := "/v1/agents/{agent}/" + path
		a.handle("POST "+base, func(w http.ResponseWriter, r *http.Request) { a.addKnowledge(w, r, kind) })
		a.handle("GET "+base, func(w http.ResponseWriter, r *http.Request) { a.listKnowledge(w, r, kind) })
		a.handle("GET "+base+"/{id}", func(w http.ResponseWriter, r *http.Request) { a.getKnowledge(w, r, kind) })
		a.handle("DELETE "+base+"/{id}", func(w http.ResponseWriter, r *http.Request) { a.deleteKnowledge(w, r, kind) })
	}
}

// addKnowledge stores one item (a JSON object) or many (NDJSON, one object per line, with
// Content-Type application/x-ndjson) in one transaction: all or none.
func (a *api) addKnowledge(w http.ResponseWriter, r *http.Request, kind store.Kind) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if r.ContentLength > maxImportBytes {
		writeError(w, &requestError{status: http.StatusRequestEntityTooLarge, code: apitype.CodeTooLarge,
			msg: fmt.Sprintf("the body is %d bytes; the limit is %d bytes: import in parts", r.ContentLength, maxImportBytes)})
		return
	}
	mt, err := mediaType(r, "send one item as application/json or many as "+apitype.NDJSONContentType, "application/json", apitype.NDJSONContentType)
	if err != nil {
		writeError(w, err)
		return
	}
	ndjson := mt == apitype.NDJSONContentType
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxImportBytes))
	if err != nil {
		writeError(w, err)
		return
	}
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")) // a byte order mark, as some editors write
	if !utf8.Valid(body) {
		writeError(w, invalid("", "the body is not valid UTF-8 (line %d): JSON text must be UTF-8", 1+bytes.Count(body[:firstInvalid(body)], []byte("\n"))))
		return
	}
	var lines [][]byte
	if ndjson {
		for line := range bytes.Lines(body) {
			// Whitespace around an item is not the item's, by the rule that makes a line of
			// whitespace blank ("{…}\v" is the object, as "\v" alone is a blank line).
			if line = bytes.TrimSpace(line); len(line) > 0 {
				lines = append(lines, line)
			}
		}
	} else {
		lines = [][]byte{body}
	}
	if len(lines) == 0 {
		writeError(w, invalid("", "the body holds no item; send a JSON object, or NDJSON lines of them"))
		return
	}
	created, err := a.store(r.Context(), agent, kind, lines)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !ndjson {
		writeJSON(w, http.StatusCreated, created[0])
		return
	}
	writeJSON(w, http.StatusCreated, apitype.Created{Created: len(created)})
}

// store decodes each line as an item of kind (its apitype shape) and stores them; it returns
// the items stored, in their apitype shape.
func (a *api) store(ctx context.Context, agent string, kind store.Kind, lines [][]byte) ([]any, error) {
	switch kind {
	case store.KindMemories:
		items, err := decodeItems(lines, func(m apitype.Memory) error { return need("text", m.Text) })
		if err != nil {
			return nil, err
		}
		return answered(a.knowledge.AddMemories(ctx, agent, each(items, func(m apitype.Memory) store.Memory { return store.Memory(m) })))
	case store.KindFacts:
		items, err := decodeItems(lines, func(f apitype.Fact) error {
			return errors.Join(need("subject", f.Subject), need("predicate", f.Predicate))
		})
		if err != nil {
			return nil, err
		}
		return answered(a.knowledge.AddFacts(ctx, agent, each(items, func(f apitype.Fact) store.Fact { return store.Fact(f) })))
	case store.KindNodes:
		items, err := decodeItems(lines, func(n apitype.Node) error { return need("id", n.ID) })
		if err != nil {
			return nil, err
		}
		return answered(a.knowledge.AddNodes(ctx, agent, each(items, func(n apitype.Node) store.Node { return store.Node(n) })))
	case store.KindEdges:
		items, err := decodeItems(lines, func(e apitype.Edge) error {
			return errors.Join(need("source", e.Source), need("target", e.Target), need("relation", e.Relation))
		})
		if err != nil {
			return nil, err
		}
		return answered(a.knowledge.AddEdges(ctx, agent, each(items, func(e apitype.Edge) store.Edge { return store.Edge(e) })))
	case store.KindDocuments:
		items, err := decodeItems(lines, func(d apitype.Document) error { return need("id", d.ID) })
		if err != nil {
			return nil, err
		}
		return answered(a.knowledge.AddDocuments(ctx, agent, each(items, func(d apitype.Document) store.Document { return store.Document(d) })))
	default: // results
		items, err := decodeItems(lines, func(s apitype.StoredResult) error { return need("key", s.Key) })
		if err != nil {
			return nil, err
		}
		for i := range items {
			items[i].ExecutionID = "" // results POSTed directly belong to no execution
		}
		return answered(a.knowledge.StoreResults(ctx, agent, each(items, func(s apitype.StoredResult) store.StoredResult { return store.StoredResult(s) })))
	}
}

// decodeItems decodes each line strictly into a T and checks it; errors name the line.
func decodeItems[T any](lines [][]byte, check func(T) error) ([]T, error) {
	items := make([]T, 0, len(lines))
	for i, line := range lines {
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var v T
		err := checkDepth(line, 1)
		if err == nil {
			err = jsonWords(dec.Decode(&v))
		}
		if err == nil {
			if _, tail := dec.Token(); tail != io.EOF {
				err = errors.New("data follows the object")
			}
		}
		if err == nil {
			err = check(v)
		}
		if err != nil {
			where := ""
			if len(lines) > 1 {
				where = fmt.Sprintf("line %d: ", i+1)
			}
			return nil, invalid("", "%s%v", where, err)
		}
		items = append(items, v)
	}
	return items, nil
}

// firstInvalid returns the offset of the first byte of b that is not valid UTF-8.
func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func need(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("%s is required", field)
	}
	return nil
}

// answered returns the store's items in their apitype shape (see knowledgeOf).
func answered[T any](items []T, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, v := range items {
		if out[i], err = knowledgeOf(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// knowledgeOf returns a knowledge item of the store (or a key's versions) in its apitype
// shape, the only one the API writes.
func knowledgeOf(v any) (any, error) {
	switch v := v.(type) {
	case store.Memory:
		return apitype.Memory(v), nil
	case store.Fact:
		return apitype.Fact(v), nil
	case store.Node:
		return apitype.Node(v), nil
	case store.Edge:
		return apitype.Edge(v), nil
	case store.Document:
		return apitype.Document(v), nil
	case store.StoredResult:
		return apitype.StoredResult(v), nil
	case []store.StoredResult:
		return apitype.ResultVersions{Versions: each(v, func(s store.StoredResult) apitype.StoredResult { return apitype.StoredResult(s) })}, nil
	}
	return nil, fmt.Errorf("the knowledge store answered a %T, which the API has no shape for", v)
}

func (a *api) listKnowledge(w http.ResponseWriter, r *http.Request, kind store.Kind) {
	agent, _, p, err := listing(r)
	if err != nil {
		writeError(w, err)
		return
	}
	items, next, err := a.knowledge.ListKnowledge(r.Context(), agent, kind, p)
	if err == nil {
		items, err = answered(items, nil)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listAnswer("items", items, next))
}

func (a *api) getKnowledge(w http.ResponseWriter, r *http.Request, kind store.Kind) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	item, err := a.knowledge.GetKnowledge(r.Context(), agent, kind, r.PathValue("id"))
	if err == nil {
		// Results answer every version of the key: a list under the resource's plural, as
		// code versions are (apitype.ResultVersions).
		item, err = knowledgeOf(item)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, item)
}

func (a *api) deleteKnowledge(w http.ResponseWriter, r *http.Request, kind store.Kind) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := a.knowledge.DeleteKnowledge(r.Context(), agent, kind, id); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.Deleted{Deleted: id})
}
