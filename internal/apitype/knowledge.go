package apitype

import (
	"encoding/json"
	"time"
)

// The knowledge store's items, as /v1/agents/{agent}/memories, facts, documents, graph/nodes,
// graph/edges and results take them (POST: one item as JSON, or many as NDJSON) and answer
// them. On POST the server sets id (where it assigns one) and created_at.

// Memory is a remembered piece of text, found by full-text search.
type Memory struct {
	ID        int64           `json:"id"`
	Text      string          `json:"text"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	// Score is the search rank (higher is better), only in search answers.
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

// Document is a text document with a title, identified by the agent's own ID.
type Document struct {
	ID        string          `json:"id"`
	Title     string          `json:"title"`
	Content   string          `json:"content"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	// Score is the search rank, only in search answers.
	Score float64 `json:"score,omitempty"`
}

// StoredResult is one version of a value stored under a key by a run (or a client).
type StoredResult struct {
	Key         string          `json:"key"`
	Version     int             `json:"version"`
	Value       json.RawMessage `json:"value,omitempty"`
	ExecutionID string          `json:"execution_id,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

// ResultVersions is the answer of GET /v1/agents/{agent}/results/{key}: every version of the
// key.
type ResultVersions struct {
	Versions []StoredResult `json:"versions"`
}

// Created is the answer of an NDJSON import: how many items it stored.
type Created struct {
	Created int `json:"created"`
}
