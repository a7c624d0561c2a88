package store

import (
	"testing"
	"time"
)

// Replacing a document or a node answers the created_at that is stored: the first one.
func TestReplacingAnswersTheStoredCreatedAt(t *testing.T) {
	s := open(t)
	first := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return first }
	if _, err := s.AddDocuments(t.Context(), "a", []Document{{ID: "d", Title: "one"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddNodes(t.Context(), "a", []Node{{ID: "n", Type: "one"}}); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return first.Add(time.Hour) }
	docs, err := s.AddDocuments(t.Context(), "a", []Document{{ID: "d", Title: "two"}})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetKnowledge(t.Context(), "a", KindDocuments, "d")
	if err != nil {
		t.Fatal(err)
	}
	if d := stored.(Document); !docs[0].CreatedAt.Equal(first) || !d.CreatedAt.Equal(first) || d.Title != "two" {
		t.Fatalf("replaced document answered created_at %v, stored %+v; want %v both", docs[0].CreatedAt, d, first)
	}
	nodes, err := s.AddNodes(t.Context(), "a", []Node{{ID: "n", Type: "two"}})
	if err != nil {
		t.Fatal(err)
	}
	if !nodes[0].CreatedAt.Equal(first) {
		t.Fatalf("replaced node answered created_at %v; want %v", nodes[0].CreatedAt, first)
	}
}
