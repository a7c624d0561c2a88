package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// H30 at the store: an agent's results stop at its byte quota with a *QuotaError naming the
// setting, other agents are not affected, and deleting the key shrinks the database file.
func TestResultQuotaAndDeleteFreesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, err := Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const quota = 24 << 20
	s.SetQuotas(Quotas{ResultsMaxBytes: quota, ResultsMaxVersions: 1000})
	base := dirBytes(t, dir)
	value := json.RawMessage(`"` + strings.Repeat("x", 4<<20-1024) + `"`)
	stored := 0
	var qerr *QuotaError
	for range 60 {
		_, err := s.StoreResult(t.Context(), "mallory", "k", value, "")
		if errors.As(err, &qerr) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stored++
		if grown := dirBytes(t, dir) - base; grown > quota+8<<20 {
			t.Fatalf("the data directory grew by %d bytes, past the quota of %d", grown, quota)
		}
	}
	if qerr == nil || qerr.Setting != "results_max_bytes" || !strings.Contains(qerr.Error(), "results_max_bytes") ||
		!strings.Contains(qerr.Error(), "DELETE /v1/agents/mallory/results/") || stored != quota/(4<<20) {
		t.Fatalf("after %d stores: %v; want a QuotaError naming results_max_bytes after %d", stored, qerr, quota/(4<<20))
	}
	if _, err := s.StoreResult(t.Context(), "alice", "k", json.RawMessage(`1`), ""); err != nil {
		t.Fatalf("another agent's store: %v", err)
	}
	full := fileBytes(t, path)
	if err := s.DeleteKnowledge(t.Context(), "mallory", KindResults, "k"); err != nil {
		t.Fatal(err)
	}
	if after := dirBytes(t, dir); after > base+2<<20 || fileBytes(t, path) >= full/4 {
		t.Fatalf("after deleting the key the data directory is %d bytes (the file %d, %d before); want back near %d", after, fileBytes(t, path), full, base)
	}
	if _, err := s.StoreResult(t.Context(), "mallory", "k", value, ""); err != nil {
		t.Fatalf("storing after the delete: %v", err)
	}
}

// The version cap refuses the next version of a full key, naming results_max_versions; other
// keys are not affected and deleting the key makes room.
func TestResultVersionCap(t *testing.T) {
	s := open(t)
	s.SetQuotas(Quotas{ResultsMaxBytes: 1 << 20, ResultsMaxVersions: 3})
	for i := range 3 {
		if r, err := s.StoreResult(t.Context(), "a", "k", json.RawMessage(`1`), ""); err != nil || r.Version != i+1 {
			t.Fatalf("version %d: %+v %v", i+1, r, err)
		}
	}
	var qerr *QuotaError
	if _, err := s.StoreResult(t.Context(), "a", "k", json.RawMessage(`1`), ""); !errors.As(err, &qerr) ||
		qerr.Setting != "results_max_versions" || !strings.Contains(err.Error(), "has 3 versions") {
		t.Fatalf("a fourth version: %v; want a QuotaError naming results_max_versions", err)
	}
	if _, err := s.StoreResult(t.Context(), "a", "other", json.RawMessage(`1`), ""); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if err := s.DeleteKnowledge(t.Context(), "a", KindResults, "k"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.StoreResult(t.Context(), "a", "k", json.RawMessage(`1`), ""); err != nil || r.Version != 1 {
		t.Fatalf("after deleting the key: %+v %v", r, err)
	}
}

// An existing database without auto-vacuum is converted when it opens, keeping its rows.
func TestOpenConvertsToIncrementalVacuum(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE old (x TEXT); INSERT INTO old VALUES ('kept')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode int
	var kept string
	if err := s.r.QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("auto_vacuum = %d (%v); want 2 (incremental)", mode, err)
	}
	if err := s.r.QueryRow(`SELECT x FROM old`).Scan(&kept); err != nil || kept != "kept" {
		t.Fatalf("the old rows: %q %v", kept, err)
	}
}

func fileBytes(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// dirBytes adds up the sizes of the files in dir (the database, its log and shared memory).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		n += fileBytes(t, filepath.Join(dir, e.Name()))
	}
	return n
}

// resultsTableBytes is what the results table and its indexes take in the database.
func resultsTableBytes(t *testing.T, s *Store) int64 {
	t.Helper()
	q := `SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'results')`
	if onPostgres(t) {
		q = `SELECT pg_total_relation_size('results')`
	}
	var n int64
	if err := s.r.QueryRowContext(t.Context(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// H52: results_max_bytes counts what a result takes where it is stored, not its payload: an
// agent with a long name storing `1` under many short keys filled the tables to 11–50 times
// its quota, counted as key and value bytes. Now the quota refuses before the table and its
// indexes hold more than twice the quota.
func TestResultQuotaCountsWhatIsStored(t *testing.T) {
	s := open(t)
	const quota = 256 << 10
	s.SetQuotas(Quotas{ResultsMaxBytes: quota, ResultsMaxVersions: 10})
	agent := strings.Repeat("m", 64)
	base := resultsTableBytes(t, s)
	stored := 0
	var qerr *QuotaError
	for batch := 0; qerr == nil && batch < 100; batch++ {
		items := make([]StoredResult, 100)
		for i := range items {
			items[i] = StoredResult{Key: fmt.Sprintf("k%d", batch*100+i), Value: json.RawMessage(`1`)}
		}
		if _, err := s.StoreResults(t.Context(), agent, items); errors.As(err, &qerr) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		stored += len(items)
	}
	grown := resultsTableBytes(t, s) - base
	t.Logf("%d results of 1 byte stored before the quota of %d bytes refused; the table grew %d bytes (%.1f× the quota)",
		stored, quota, grown, float64(grown)/quota)
	if qerr == nil || qerr.Setting != "results_max_bytes" {
		t.Fatalf("after %d results: %v; want a QuotaError of results_max_bytes", stored, qerr)
	}
	if grown > 2*quota {
		t.Errorf("the results table grew %d bytes under a quota of %d; want at most twice the quota", grown, quota)
	}
}
