package store

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/pgtest"
)

// open returns a new, empty store: SQLite, or PostgreSQL for the cases TestPostgres runs.
func open(t *testing.T) *Store {
	t.Helper()
	if onPostgres(t) {
		s, err := OpenPostgres(t.Context(), pgtest.URL(t), 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func record(t *testing.T, s *Store, agent string, source sandbox.Source, at time.Time, outcome sandbox.Outcome) sandbox.Result {
	t.Helper()
	head := sandbox.Result{ID: sandbox.NewID(), Agent: agent, TimeoutMS: 1000, StartedAt: at,
		Origin: sandbox.Origin{Source: sandbox.Source(source)}}
	spec := sandbox.Spec{ID: head.ID, Code: "print('测试 😀')", Input: json.RawMessage(`{"n":1}`), TimeoutMS: 1000}
	if err := s.Begin(t.Context(), spec, head); err != nil {
		t.Fatal(err)
	}
	res := head
	res.Outcome, res.Success, res.Stdout, res.Output, res.DurationMS = outcome, outcome == sandbox.OutcomeOK, "测试 😀\n", json.RawMessage(`{"a":[1,2]}`), 12
	res.Start, res.OOMKills = "fork", 2
	if err := s.Finish(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestLedgerRecordsAndReadsBack(t *testing.T) {
	s := open(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	res := record(t, s, "a1", sandbox.SourceCLI, at, sandbox.OutcomeOK)
	got, err := s.GetExecution(t.Context(), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusFinished || got.Outcome != sandbox.OutcomeOK || !got.Success || got.Stdout != "测试 😀\n" ||
		string(got.Output) != `{"a":[1,2]}` || string(got.Input) != `{"n":1}` || got.Code != "print('测试 😀')" ||
		got.Source != "cli" || !got.StartedAt.Equal(at) || got.EndedAt == nil || !got.EndedAt.Equal(at.Add(12*time.Millisecond)) ||
		got.CodeSHA256 != CodeSHA256("print('测试 😀')") || got.Start != "fork" || got.OOMKills != 2 {
		t.Fatalf("read back %+v", got)
	}
	if _, err := s.GetExecution(t.Context(), "ex_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing execution: %v", err)
	}
}

func TestFinishInterruptedFinalisesRunningRecords(t *testing.T) {
	s := open(t)
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "default", TimeoutMS: 5, StartedAt: time.Now().UTC(), Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(t.Context(), sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null")}, head); err != nil {
		t.Fatal(err)
	}
	done := record(t, s, "default", "api", time.Now().UTC(), sandbox.OutcomeError)
	n, err := s.FinishInterrupted(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("FinishInterrupted = %d, %v; want 1", n, err)
	}
	got, _ := s.GetExecution(t.Context(), head.ID)
	if got.Status != StatusFinished || got.Outcome != sandbox.OutcomeSandboxError || got.Reason != ReasonInterrupted || got.EndedAt == nil {
		t.Fatalf("interrupted record: %+v", got)
	}
	if got, _ := s.GetExecution(t.Context(), done.ID); got.Outcome != sandbox.OutcomeError {
		t.Fatalf("a finished record changed: %+v", got)
	}
}

func TestListExecutionsFiltersAndPages(t *testing.T) {
	s := open(t)
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 7 {
		agent, outcome := "a", sandbox.OutcomeOK
		if i%2 == 1 {
			agent, outcome = "b", sandbox.OutcomeTimeout
		}
		// Two records share each start time, so paging must break ties by ID.
		ids = append(ids, record(t, s, agent, "api", base.Add(time.Duration(i/2)*time.Second), outcome).ID)
	}
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		list, next, err := s.ListExecutions(t.Context(), ExecutionFilter{}, Page{Cursor: cursor, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			seen = append(seen, e.ID)
		}
		if next == "" {
			break
		}
		cursor = next
		if page > 10 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 7 {
		t.Fatalf("paged through %d records, want 7: %v", len(seen), seen)
	}
	unique := map[string]bool{}
	for _, id := range seen {
		unique[id] = true
	}
	if len(unique) != 7 {
		t.Fatalf("paging repeated records: %v", seen)
	}
	list, _, _ := s.ListExecutions(t.Context(), ExecutionFilter{Agent: "b", Outcome: sandbox.OutcomeTimeout}, Page{})
	if len(list) != 3 {
		t.Fatalf("agent b timeouts: %d, want 3", len(list))
	}
	list, _, _ = s.ListExecutions(t.Context(), ExecutionFilter{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)}, Page{})
	if len(list) != 4 {
		t.Fatalf("time range: %d, want 4", len(list))
	}
	// Listed records carry the exit code and previews of their output: the first
	// PreviewChars characters of stdout, the last of stderr (where a traceback ends).
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "c", TimeoutMS: 1000, StartedAt: base.Add(time.Hour), Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(t.Context(), sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null")}, head); err != nil {
		t.Fatal(err)
	}
	failed := head
	failed.Outcome, failed.ExitCode = sandbox.OutcomeError, 3
	failed.Stdout = strings.Repeat("é", PreviewChars) + "MORE"
	failed.Stderr = "Traceback (most recent call last):\n" + strings.Repeat("x", PreviewChars) + "\nValueError: bad"
	if err := s.Finish(t.Context(), failed); err != nil {
		t.Fatal(err)
	}
	list, _, _ = s.ListExecutions(t.Context(), ExecutionFilter{Agent: "c"}, Page{})
	if len(list) != 1 || list[0].ExitCode != 3 || list[0].StdoutPreview != strings.Repeat("é", PreviewChars) ||
		!strings.HasSuffix(list[0].StderrPreview, "\nValueError: bad") || len([]rune(list[0].StderrPreview)) != PreviewChars {
		t.Fatalf("preview: %+v", list)
	}
	if _, _, err := s.ListExecutions(t.Context(), ExecutionFilter{}, Page{Cursor: "!!"}); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestPruneKeepsNewestAndRunning(t *testing.T) {
	s := open(t)
	now := time.Now().UTC()
	old := record(t, s, "a", "api", now.Add(-48*time.Hour), sandbox.OutcomeOK)
	running := sandbox.Result{ID: sandbox.NewID(), Agent: "a", StartedAt: now.Add(-72 * time.Hour), Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(t.Context(), sandbox.Spec{ID: running.ID, Code: "other", Input: json.RawMessage("null")}, running); err != nil {
		t.Fatal(err)
	}
	var recent []string
	for i := range 3 {
		recent = append(recent, record(t, s, "a", "api", now.Add(-time.Duration(i)*time.Minute), sandbox.OutcomeOK).ID)
	}
	n, err := s.Prune(t.Context(), Retention{MaxAge: 24 * time.Hour, MaxCount: 2})
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2 (the old one and the third newest)", n, err)
	}
	for _, id := range []string{old.ID, recent[2]} {
		if _, err := s.GetExecution(t.Context(), id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s survived pruning", id)
		}
	}
	for _, id := range []string{running.ID, recent[0], recent[1]} {
		if _, err := s.GetExecution(t.Context(), id); err != nil {
			t.Errorf("%s was pruned: %v", id, err)
		}
	}
	if got, _ := s.GetExecution(t.Context(), running.ID); got.Code != "other" {
		t.Errorf("the running record's code blob was pruned")
	}
}

func TestCodeVersionsAndConflicts(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	c := Code{Agent: "a", Name: "sum", Code: "v1", Dependencies: []string{"tinypkg==1.0"}, InputSchema: json.RawMessage(`{"type":"object"}`),
		Template: "tools"}
	v1, err := s.CreateCode(ctx, c)
	if err != nil || v1.Version != 1 {
		t.Fatalf("create: %+v %v", v1, err)
	}
	if _, err := s.CreateCode(ctx, c); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	c.Code, c.Template = "v2", ""
	v2, err := s.UpdateCode(ctx, c, 1)
	if err != nil || v2.Version != 2 || !v2.CreatedAt.Equal(v1.CreatedAt) {
		t.Fatalf("update: %+v %v", v2, err)
	}
	var conflict *VersionConflictError
	if _, err := s.UpdateCode(ctx, c, 1); !errors.As(err, &conflict) || conflict.Current != 2 {
		t.Fatalf("stale update: %v", err)
	}
	if got, _ := s.GetCode(ctx, "a", "sum", 0); got.Code != "v2" || got.Version != 2 || got.Template != "" {
		t.Fatalf("latest: %+v", got)
	}
	if got, _ := s.GetCode(ctx, "a", "sum", 1); got.Code != "v1" || got.Dependencies[0] != "tinypkg==1.0" || string(got.InputSchema) != `{"type":"object"}` || string(got.OutputSchema) != "null" ||
		got.Template != "tools" {
		t.Fatalf("version 1: %+v", got)
	}
	if _, err := s.GetCode(ctx, "b", "sum", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another agent read the code: %v", err)
	}
	if vs, _ := s.ListCodeVersions(ctx, "a", "sum"); len(vs) != 2 || vs[0].Version != 2 || vs[0].Template != "" || vs[1].Template != "tools" {
		t.Fatalf("versions: %+v", vs)
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if _, err := s.CreateCode(ctx, Code{Agent: "a", Name: name, Code: "x", Description: "Does " + name}); err != nil {
			t.Fatal(err)
		}
	}
	list, next, _ := s.ListCode(ctx, "a", "", Page{Limit: 3})
	if len(list) != 3 || list[0].Name != "alpha" || next == "" {
		t.Fatalf("page 1: %d %q", len(list), next)
	}
	list, next, _ = s.ListCode(ctx, "a", "", Page{Limit: 3, Cursor: next})
	if len(list) != 1 || list[0].Name != "sum" || next != "" {
		t.Fatalf("page 2: %+v %q", list, next)
	}
	if list, _, _ := s.ListCode(ctx, "a", "DOES B", Page{}); len(list) != 1 || list[0].Name != "beta" {
		t.Fatalf("filter: %+v", list)
	}
}

func TestDeleteCodeInUseByJob(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	if _, err := s.CreateCode(ctx, Code{Agent: "a", Name: "report", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(ctx, Job{ID: "job_x", Agent: "a", CodeName: "missing", Input: json.RawMessage("null")}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("job for missing code: %v", err)
	}
	next := time.Now().Add(time.Hour)
	if _, err := s.CreateJob(ctx, Job{ID: "job_1", Agent: "a", CodeName: "report", Schedule: "@hourly", Timezone: "UTC",
		Input: json.RawMessage("null"), Enabled: true, Overlap: "skip", CatchUp: "skip", NextRunAt: &next}); err != nil {
		t.Fatal(err)
	}
	var inUse *InUseError
	if _, err := s.DeleteCode(ctx, "a", "report", false); !errors.As(err, &inUse) || inUse.Jobs[0] != "job_1" {
		t.Fatalf("delete in use: %v", err)
	}
	jobs, err := s.DeleteCode(ctx, "a", "report", true)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("force delete: %v %v", jobs, err)
	}
	j, _ := s.GetJob(ctx, "a", "job_1")
	if j.Enabled || j.NextRunAt != nil {
		t.Fatalf("the job of deleted code is still enabled: %+v", j)
	}
}

func TestClaimFiresOnce(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	if _, err := s.CreateCode(ctx, Code{Agent: "a", Name: "c", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	due := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if _, err := s.CreateJob(ctx, Job{ID: "job_1", Agent: "a", CodeName: "c", Schedule: "@every 10s", Timezone: "UTC",
		Input: json.RawMessage("null"), Enabled: true, Overlap: "skip", CatchUp: "skip", NextRunAt: &due}); err != nil {
		t.Fatal(err)
	}
	if d, ok, _ := s.NextDue(ctx); !ok || !d.Equal(due) {
		t.Fatalf("NextDue = %v %v", d, ok)
	}
	if jobs, _ := s.DueJobs(ctx, due.Add(-time.Millisecond)); len(jobs) != 0 {
		t.Fatal("a job is due before its time")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	claims := 0
	for range 8 {
		wg.Go(func() {
			fire := Fire{JobID: "job_1", Agent: "a", Kind: FireScheduled, Status: FireStarted, ScheduledAt: due, FiredAt: due, ExecutionID: sandbox.NewID()}
			_, ok, err := s.ClaimFires(context.Background(), "job_1", due, due.Add(10*time.Second), []Fire{fire})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				claims++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if claims != 1 {
		t.Fatalf("%d claims of one fire", claims)
	}
	fires, _, _ := s.ListFires(ctx, "a", "job_1", FireFilter{}, Page{})
	if len(fires) != 1 || fires[0].Status != FireStarted {
		t.Fatalf("fires: %+v", fires)
	}
	if n, _ := s.FailUnstartedFires(ctx); n != 1 {
		t.Fatalf("FailUnstartedFires = %d, want 1 (its execution never began)", n)
	}

	// A fire whose run began.
	next := due.Add(10 * time.Second)
	f2 := Fire{JobID: "job_1", Agent: "a", Kind: FireScheduled, Status: FireStarted, ScheduledAt: next, FiredAt: next, ExecutionID: sandbox.NewID()}
	if _, ok, err := s.ClaimFires(ctx, "job_1", next, next.Add(10*time.Second), []Fire{f2}); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	head := sandbox.Result{ID: f2.ExecutionID, Agent: "a", StartedAt: next, Origin: sandbox.Origin{Source: "job", JobID: "job_1"}}
	if err := s.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null")}, head); err != nil {
		t.Fatal(err)
	}
	head.Outcome, head.Reason = sandbox.OutcomeTimeout, "the run passed its timeout of 30s and was killed"
	if err := s.Finish(ctx, head); err != nil {
		t.Fatal(err)
	}
	// A fire whose run failed says why: its execution's reason (REASON was empty).
	if fires, _, _ := s.ListFires(ctx, "a", "job_1", FireFilter{}, Page{}); len(fires) != 2 || fires[0].Outcome != string(sandbox.OutcomeTimeout) || fires[0].Reason != head.Reason ||
		fires[1].Reason != "interrupted: the daemon stopped before the run started" {
		t.Fatalf("fires: %+v", fires)
	}
	// Time filters bound fired_at (since <= fired_at < until) and page with the cursor.
	firedAt := func(fires []Fire) (ms []int64) {
		for _, f := range fires {
			ms = append(ms, f.FiredAt.UnixMilli())
		}
		return ms
	}
	if fires, _, _ := s.ListFires(ctx, "a", "job_1", FireFilter{Since: next}, Page{}); !slices.Equal(firedAt(fires), []int64{next.UnixMilli()}) {
		t.Fatalf("since the second fire: %+v", fires)
	}
	if fires, _, _ := s.ListFires(ctx, "a", "job_1", FireFilter{Until: next}, Page{}); !slices.Equal(firedAt(fires), []int64{due.UnixMilli()}) {
		t.Fatalf("until the second fire: %+v", fires)
	}
	both := FireFilter{Since: due, Until: next.Add(time.Millisecond)}
	page1, cursor, _ := s.ListFires(ctx, "a", "job_1", both, Page{Limit: 1})
	page2, end, _ := s.ListFires(ctx, "a", "job_1", both, Page{Limit: 1, Cursor: cursor})
	if !slices.Equal(firedAt(append(page1, page2...)), []int64{next.UnixMilli(), due.UnixMilli()}) || end != "" {
		t.Fatalf("two pages of one fire: %+v %+v, then %q", page1, page2, end)
	}
	if fires, _, _ := s.ListFires(ctx, "b", "job_1", FireFilter{}, Page{}); fires != nil {
		t.Fatal("another agent read the job's history")
	}
	// The fires go with the ledger (they were never pruned: a job of many skipped fires filled
	// the database past ledger_max_bytes): the one whose record is pruned with it, the failed
	// one that started no run by its own age.
	s.now = func() time.Time { return next.Add(24 * time.Hour) }
	if n, err := s.Prune(ctx, Retention{MaxAge: time.Hour}); n != 1 || err != nil {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	if n, _ := s.FailUnstartedFires(ctx); n != 0 {
		t.Fatalf("FailUnstartedFires failed %d fires whose runs began (their records were pruned)", n)
	}
	if fires, _, _ := s.ListFires(ctx, "a", "job_1", FireFilter{}, Page{}); len(fires) != 0 {
		t.Fatalf("after pruning a day's records with ledger_max_age of an hour, the fires are still there: %+v", fires)
	}
}
