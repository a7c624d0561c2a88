package store

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// beginBytes is what recordBaseSQL counts for spec's record without files.
func beginBytes(spec sandbox.Spec) int64 {
	return recordOverheadBytes + int64(len(spec.Code)) + int64(len(spec.Input))
}

// bigRecord records a finished run started at at with stdout of n bytes and, when file > 0,
// an output file of file bytes.
func bigRecord(t *testing.T, s *Store, f *Files, at time.Time, n, file int) string {
	t.Helper()
	id := begin(t, s, at)
	res := sandbox.Result{ID: id, Agent: "a", Outcome: sandbox.OutcomeOK, StartedAt: at, Stdout: strings.Repeat("x", n)}
	if file > 0 {
		if err := put(t, f, id, "out.bin", file); err != nil {
			t.Fatal(err)
		}
		res.Files = []sandbox.File{{Name: "out.bin", SizeBytes: int64(file)}}
	}
	if err := s.Finish(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	return id
}

// recordBytes returns execution_bytes' size of record id (-1 when it has none).
func recordBytes(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	var n int64
	if err := s.r.QueryRowContext(t.Context(), `SELECT bytes FROM execution_bytes WHERE execution_id = ?`, id).Scan(&n); err != nil {
		return -1
	}
	return n
}

func exists(t *testing.T, s *Store, id string) bool {
	t.Helper()
	_, err := s.GetExecution(t.Context(), id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestPruneByBytesOldestFirst: past ledger_max_bytes a write signals PruneDue, and Prune
// deletes the oldest finished records, with their output files, down to LedgerLowWater percent
// of the budget; running records stay.
func TestPruneByBytesOldestFirst(t *testing.T) {
	s, f, dir := openFiles(t, 64<<20)
	const kib = 1 << 10
	now := time.Now().UTC()
	running := begin(t, s, now.Add(-time.Hour)) // older than all, never pruned
	var ids []string
	for i := range 10 {
		ids = append(ids, bigRecord(t, s, f, now.Add(time.Duration(i-10)*time.Minute), 100*kib, 20*kib))
	}
	per := recordBytes(t, s, ids[0])
	// The record counts its row, code, input, stdout, JSON list of files and the file's blocks.
	if min := int64(100*kib + chargeOf(20*kib)); per < min || per > min+1024 {
		t.Fatalf("a record of 100 KiB of stdout and a 20 KiB file counts %d bytes, want %d and a little", per, min)
	}
	select {
	case <-s.PruneDue():
		t.Fatal("PruneDue signalled with no budget set")
	default:
	}
	max := 6 * per // the newest 5 fit under 90% of it; 10 records pass it
	s.SetRetention(Retention{MaxBytes: max})
	select {
	case <-s.PruneDue():
	default:
		t.Fatalf("the ledger holds %d bytes, over its budget of %d, and PruneDue did not signal", s.LedgerBytes(), max)
	}
	n, err := s.Prune(t.Context(), Retention{MaxBytes: max})
	if err != nil || n != 5 {
		t.Fatalf("Prune = %d, %v; want the 5 oldest records gone", n, err)
	}
	if used := s.LedgerBytes(); used > max/100*LedgerLowWater || used < 5*per {
		t.Errorf("after Prune the ledger holds %d bytes; want the 5 newest records (%d) within %d", used, 5*per, max/100*LedgerLowWater)
	}
	for i, id := range ids {
		if kept := exists(t, s, id); kept != (i >= 5) {
			t.Errorf("record %d (of 10, oldest first) kept = %v", i, kept)
		}
		_, err := read(t, f, id, "out.bin")
		if kept := err == nil; kept != (i >= 5) {
			t.Errorf("record %d's file kept = %v (%v)", i, kept, err)
		}
		if !onPostgres(t) {
			if _, err := os.Stat(filepath.Join(dir, id)); (err == nil) != (i >= 5) {
				t.Errorf("record %d's file directory: %v", i, err)
			}
		}
		if kept := recordBytes(t, s, id) >= 0; kept != (i >= 5) {
			t.Errorf("record %d's size row kept = %v", i, kept)
		}
	}
	if !exists(t, s, running) {
		t.Error("the running record was pruned")
	}
	if used, _ := f.Used(); used != 5*chargeOf(20*kib) {
		t.Errorf("the files quota counts %d bytes, want the 5 kept files' %d", used, 5*chargeOf(20*kib))
	}
	// Under the budget, a write does not signal and Prune deletes nothing.
	bigRecord(t, s, f, now, 10*kib, 0)
	select {
	case <-s.PruneDue():
		t.Error("PruneDue signalled under the budget")
	default:
	}
	if n, err := s.Prune(t.Context(), Retention{MaxBytes: max}); err != nil || n != 0 {
		t.Errorf("Prune under the budget = %d, %v", n, err)
	}
}

// TestPruneByBytesKeepsTheNewestRecord: a record larger than the whole budget is still written
// and kept, until the next one finishes.
func TestPruneByBytesKeepsTheNewestRecord(t *testing.T) {
	s, f, _ := openFiles(t, 64<<20)
	max := int64(64 << 10)
	s.SetRetention(Retention{MaxBytes: max})
	now := time.Now().UTC()
	huge := bigRecord(t, s, f, now.Add(-time.Minute), 256<<10, 0)
	if n, err := s.Prune(t.Context(), Retention{MaxBytes: max}); err != nil || n != 0 || !exists(t, s, huge) {
		t.Fatalf("Prune = %d, %v; want the only record kept though it is over the budget", n, err)
	}
	next := bigRecord(t, s, f, now, 100, 0)
	if n, err := s.Prune(t.Context(), Retention{MaxBytes: max}); err != nil || n != 1 || exists(t, s, huge) || !exists(t, s, next) {
		t.Fatalf("Prune = %d, %v; want the huge record gone once a newer one finished", n, err)
	}
	if used := s.LedgerBytes(); used != recordBytes(t, s, next) {
		t.Errorf("LedgerBytes = %d, want the one record's %d", used, recordBytes(t, s, next))
	}
}

// TestEvictedFilesLeaveTheRecordsBytes: a file evicted by files_max_bytes no longer counts in
// its record's bytes.
func TestEvictedFilesLeaveTheRecordsBytes(t *testing.T) {
	s, f, _ := openFiles(t, 2*chargeOf(40<<10))
	now := time.Now().UTC()
	old := bigRecord(t, s, f, now.Add(-time.Minute), 10, 40<<10)
	before, total := recordBytes(t, s, old), s.LedgerBytes()
	bigRecord(t, s, f, now.Add(-30*time.Second), 10, 40<<10)
	bigRecord(t, s, f, now, 10, 40<<10) // evicts old's file
	if got := recordBytes(t, s, old); got != before-chargeOf(40<<10) {
		t.Errorf("old record counts %d bytes after its file was evicted, want %d", got, before-chargeOf(40<<10))
	}
	if got := s.LedgerBytes(); got != 3*total-chargeOf(40<<10) {
		t.Errorf("LedgerBytes = %d, want %d", got, 3*total-chargeOf(40<<10))
	}
}

// TestLedgerBytesMigrationFillsOldRecords: the migration that adds execution_bytes fills it
// for the records already there with what Begin and Finish count for new ones.
func TestLedgerBytesMigrationFillsOldRecords(t *testing.T) {
	s, f, _ := openFiles(t, 64<<20)
	ctx := t.Context()
	now := time.Now().UTC()
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: now, Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "print('é')", Input: json.RawMessage(`{"k":"ü"}`), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	if err := put(t, f, head.ID, "a.csv", 5000); err != nil {
		t.Fatal(err)
	}
	res := head
	res.Outcome, res.Stdout, res.Stderr, res.Output, res.Reason = sandbox.OutcomeError, "out é\n", "Traceback\n", json.RawMessage(`{"a":1}`), "exit 1"
	res.Dependencies = []sandbox.DependencyStatus{{Requirement: "tinypkg==1.0", Status: "present", Version: "1.0"}}
	res.Logs = []sandbox.LogLine{{Level: "info", Message: "hello ü", CreatedAt: now}, {Level: "warn", Message: "w", CreatedAt: now}}
	res.Files = []sandbox.File{{Name: "a.csv", SizeBytes: 5000}}
	res.FilesSkipped = []sandbox.SkippedFile{{Name: "b", Reason: "too large"}}
	res.Egress = []sandbox.EgressConnection{{Host: "example.com", Port: 443, Allowed: true}}
	if err := s.Finish(ctx, res); err != nil {
		t.Fatal(err)
	}
	plain := record(t, s, "a", "api", now.Add(-time.Minute), sandbox.OutcomeOK).ID
	running := begin(t, s, now.Add(-2*time.Minute))
	want := map[string]int64{}
	for _, id := range []string{head.ID, plain} {
		want[id] = recordBytes(t, s, id)
	}
	if got := recordBytes(t, s, running); got != -1 {
		t.Fatalf("a running record has a size (%d) before it finishes", got)
	}
	want[running] = beginBytes(sandbox.Spec{Code: "x", Input: json.RawMessage("null")}) // as begin writes it
	if want[head.ID] < chargeOf(5000)+recordOverheadBytes {
		t.Fatalf("the record counts %d bytes, less than its file and row", want[head.ID])
	}

	// Back to the schema before execution_bytes, and up again: the records are old ones now.
	sub, dialect, before := "migrations", goose.DialectSQLite3, int64(14)
	if s.pg {
		sub, dialect, before = "migrations_pg", goose.DialectPostgres, 4
	}
	dir, err := fs.Sub(migrations, sub)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(dialect, s.w.DB, dir, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	if recordBytes(t, s, plain) != -1 {
		t.Fatal("execution_bytes survived the down migration")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got := recordBytes(t, s, id); got != w {
			t.Errorf("the migration counts record %s as %d bytes; Begin and Finish counted %d", id, got, w)
		}
	}
}

// TestFinishInterruptedCountsTheRecords: a record finalised when its daemon is gone gets its
// size: what Begin wrote and its kept files.
func TestFinishInterruptedCountsTheRecords(t *testing.T) {
	s, f, _ := openFiles(t, 64<<20)
	id := begin(t, s, time.Now())
	if err := put(t, f, id, "a", 100); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FinishInterrupted(t.Context()); err != nil || n != 1 {
		t.Fatalf("FinishInterrupted = %d, %v", n, err)
	}
	want := beginBytes(sandbox.Spec{Code: "x", Input: json.RawMessage("null")}) + chargeOf(100)
	if got := recordBytes(t, s, id); got != want {
		t.Errorf("the interrupted record counts %d bytes, want %d", got, want)
	}
	if got := s.LedgerBytes(); got != want {
		t.Errorf("LedgerBytes = %d, want %d", got, want)
	}
}

// recordOf finishes a record of agent started at at, with n bytes of stdout and a file of file
// bytes (none when 0).
func recordOf(t *testing.T, s *Store, f *Files, agent string, at time.Time, n, file int) string {
	t.Helper()
	head := sandbox.Result{ID: sandbox.NewID(), Agent: agent, TimeoutMS: 1000, StartedAt: at, Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(t.Context(), sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	res := head
	res.Outcome, res.Stdout = sandbox.OutcomeOK, strings.Repeat("x", n)
	if file > 0 {
		if err := put(t, f, head.ID, "out.bin", file); err != nil {
			t.Fatal(err)
		}
		res.Files = []sandbox.File{{Name: "out.bin", SizeBytes: int64(file)}}
	}
	if err := s.Finish(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	return head.ID
}

// H53: one agent's runs do not erase another agent's history. Before, the ledger's byte budget
// and the files' quota were pruned oldest first across agents: ten large runs of mallory
// removed alice's two older records and their files. Now an agent over its share loses its own
// records (and files) first, and each agent keeps its newest.
func TestPruneIsFairBetweenAgents(t *testing.T) {
	const kib = 1 << 10
	s, f, _ := openFiles(t, 6*chargeOf(20*kib))
	now := time.Now().UTC()
	alice := []string{
		recordOf(t, s, f, "alice", now.Add(-100*time.Minute), 100*kib, 20*kib),
		recordOf(t, s, f, "alice", now.Add(-90*time.Minute), 100*kib, 20*kib),
	}
	per := recordBytes(t, s, alice[0])
	var mallory []string
	for i := range 10 {
		mallory = append(mallory, recordOf(t, s, f, "mallory", now.Add(time.Duration(i-10)*time.Minute), 100*kib, 20*kib))
	}
	// The files' quota holds 6 files: mallory's runs evicted their own older files, not alice's.
	for _, id := range alice {
		if _, err := read(t, f, id, "out.bin"); err != nil {
			t.Errorf("alice's file of %s was evicted for mallory's runs: %v", id, err)
		}
	}
	if _, err := read(t, f, mallory[9], "out.bin"); err != nil {
		t.Errorf("mallory's newest file: %v", err)
	}
	max := 6 * per
	if _, err := s.Prune(t.Context(), Retention{MaxBytes: max}); err != nil {
		t.Fatal(err)
	}
	for _, id := range alice {
		if !exists(t, s, id) {
			t.Errorf("alice's record %s was pruned for mallory's runs", id)
		}
	}
	kept := 0
	for i, id := range mallory {
		if exists(t, s, id) {
			kept++
		} else if i == 9 {
			t.Error("mallory's newest record was pruned")
		}
	}
	if used := s.LedgerBytes(); used > max/100*LedgerLowWater || kept < 3 {
		t.Errorf("after Prune the ledger holds %d bytes (mallory keeps %d records); want at most %d, mallory keeping its newest 3",
			used, kept, max/100*LedgerLowWater)
	}
	// Alone over the budget, alice keeps her newest record too.
	big := recordOf(t, s, f, "alice", now, 8*int(per), 0)
	if _, err := s.Prune(t.Context(), Retention{MaxBytes: max}); err != nil {
		t.Fatal(err)
	}
	if !exists(t, s, big) || !exists(t, s, mallory[9]) {
		t.Errorf("the newest records: alice's %v, mallory's %v; want both kept", exists(t, s, big), exists(t, s, mallory[9]))
	}
}

// H54: job fires count in ledger_max_bytes and go with it. Before, a job's fires were never
// pruned and counted nowhere (about 1 GB a day at jobs_max): skipped fires grew the database
// while LedgerBytes stayed put. Now a fire that started no run counts on its own and goes
// with its agent's share; a fire that started one counts in that run's record.
func TestJobFiresCountInTheLedger(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	if _, err := s.CreateCode(ctx, Code{Agent: "a", Name: "c", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	job, err := s.CreateJob(ctx, Job{ID: "job_1", Agent: "a", CodeName: "c", Schedule: "@every 1s", Timezone: "UTC",
		Input: json.RawMessage("null"), Enabled: true, Overlap: "skip", CatchUp: "skip", NextRunAt: &at})
	if err != nil {
		t.Fatal(err)
	}
	before := s.LedgerBytes()
	const skipped = 200
	for i := range skipped {
		f := Fire{JobID: job.ID, Agent: "a", Kind: FireScheduled, Status: FireSkipped, ScheduledAt: at, FiredAt: at}
		if _, ok, err := s.ClaimFires(ctx, job.ID, at, at.Add(time.Second), []Fire{f}); !ok || err != nil {
			t.Fatalf("claim %d: %v %v", i, ok, err)
		}
		at = at.Add(time.Second)
	}
	perFire := fireBytes(Fire{JobID: job.ID, Agent: "a", Kind: FireScheduled, Status: FireSkipped}, "")
	if grown := s.LedgerBytes() - before; grown < skipped*perFire {
		t.Fatalf("%d skipped fires grew the ledger's bytes by %d; want at least %d", skipped, grown, skipped*perFire)
	}
	if err := s.countLedgerBytes(ctx); err != nil || s.LedgerBytes()-before < skipped*perFire {
		t.Fatalf("recounted, the ledger holds %d bytes (%v); want the fires' %d", s.LedgerBytes(), err, skipped*perFire)
	}
	// A budget the fires pass: pruning removes the oldest of them, down to the low water.
	max := 100 * perFire
	if _, err := s.Prune(ctx, Retention{MaxBytes: max}); err != nil {
		t.Fatal(err)
	}
	fires, _, err := s.ListFires(ctx, "a", job.ID, FireFilter{}, Page{Limit: 1000})
	if err != nil || len(fires) == 0 || len(fires) > 90 || s.LedgerBytes() > max/100*LedgerLowWater {
		t.Fatalf("after Prune: %d fires (%v), the ledger %d bytes; want at most 90 fires within %d bytes", len(fires), err, s.LedgerBytes(), max/100*LedgerLowWater)
	}
	if !fires[0].FiredAt.Equal(at.Add(-time.Second)) {
		t.Errorf("the newest fire left is of %v; want the last one, %v", fires[0].FiredAt, at.Add(-time.Second))
	}
}
