package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
	"github.com/sandpit-dev/sandpit/internal/testenv/pgtest"
)

// The store conformance suite: every case of this package that is about the store's contract
// (not about SQLite's files on disk) runs on SQLite as its own test, and again on PostgreSQL
// under TestPostgres (open gives each a fresh schema of SANDPIT_TEST_DATABASE_URL).

// conformance lists the cases TestPostgres runs.
var conformance = []struct {
	name string
	test func(*testing.T)
}{
	{"LedgerRecordsAndReadsBack", TestLedgerRecordsAndReadsBack},
	{"ExecutionEgressRoundTrip", TestExecutionEgressRoundTrip},
	{"FinishInterruptedFinalisesRunningRecords", TestFinishInterruptedFinalisesRunningRecords},
	{"ListExecutionsFiltersAndPages", TestListExecutionsFiltersAndPages},
	{"PruneKeepsNewestAndRunning", TestPruneKeepsNewestAndRunning},
	{"CodeVersionsAndConflicts", TestCodeVersionsAndConflicts},
	{"DeleteCodeInUseByJob", TestDeleteCodeInUseByJob},
	{"ClaimFiresOnce", TestClaimFiresOnce},
	{"JobFilesAreKept", TestJobFilesAreKept},
	{"ReplacingAnswersTheStoredCreatedAt", TestReplacingAnswersTheStoredCreatedAt},
	{"ResultVersionCap", TestResultVersionCap},
	{"SearchRanksByBM25WithinTheAgent", TestSearchRanksByBM25WithinTheAgent},
	{"KnowledgeKeepsHostileText", TestKnowledgeKeepsHostileText},
	{"FilesServedByEveryHandle", TestFilesServedByEveryHandle},
	{"SessionHibernationLedger", TestSessionHibernationLedger},
	{"DaemonsRecoverExpiredLeases", TestDaemonsRecoverExpiredLeases},
	{"OverlapIsDecidedFromTheSharedLedger", TestOverlapIsDecidedFromTheSharedLedger},
	{"SessionLedger", TestSessionLedger},
	{"SessionCommandsRecordedAndPruned", TestSessionCommandsRecordedAndPruned},
	{"SessionCommandsCountInTheLedgerFairly", TestSessionCommandsCountInTheLedgerFairly},
	{"JobQuotas", TestJobQuotas},
	{"PruneByBytesOldestFirst", TestPruneByBytesOldestFirst},
	{"PruneByBytesKeepsTheNewestRecord", TestPruneByBytesKeepsTheNewestRecord},
	{"EvictedFilesLeaveTheRecordsBytes", TestEvictedFilesLeaveTheRecordsBytes},
	{"LedgerBytesMigrationFillsOldRecords", TestLedgerBytesMigrationFillsOldRecords},
	{"FinishInterruptedCountsTheRecords", TestFinishInterruptedCountsTheRecords},
	{"FilesStreamInParts", TestFilesStreamInParts},
	{"ResultQuotaCountsWhatIsStored", TestResultQuotaCountsWhatIsStored},
	{"PruneIsFairBetweenAgents", TestPruneIsFairBetweenAgents},
	{"JobFiresCountInTheLedger", TestJobFiresCountInTheLedger},
	{"NotebookResultsAreKept", TestNotebookResultsAreKept},
	{"ExecutionTemplatesAreKept", TestExecutionTemplatesAreKept},
	{"TemplateVersionsAndTags", TestTemplateVersionsAndTags},
	{"APIKeys", TestAPIKeys},
	{"PortRequestsRecordedAndPruned", TestPortRequestsRecordedAndPruned},
	{"PortShares", TestPortShares},
	{"SecretsAreSealedAndScoped", TestSecretsAreSealedAndScoped},
	{"JobSecretsAreKept", TestJobSecretsAreKept},
}

// onPostgres says whether t is a case TestPostgres runs.
func onPostgres(t *testing.T) bool { return strings.HasPrefix(t.Name(), "TestPostgres/") }

// TestPostgres runs the conformance suite on PostgreSQL.
func TestPostgres(t *testing.T) {
	pgtest.Base(t)
	for _, c := range conformance {
		t.Run(c.name, c.test)
	}
}

// TestSearchRanksByBM25WithinTheAgent pins the ranking contract on one corpus: the order and
// scores depend on the agent's own rows only, and are the same on both backends.
func TestSearchRanksByBM25WithinTheAgent(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	corpus := []string{
		"the quick brown fox jumps over the lazy dog",
		"a fox, a fox, a fox in the henhouse",
		"dogs and cats living together",
		"brown bread and brown butter",
		"nothing to see here",
		"Fox news: the fox is quick",
	}
	var items []Memory
	for _, text := range corpus {
		items = append(items, Memory{Text: text})
	}
	if _, err := s.AddMemories(ctx, "a", items); err != nil {
		t.Fatal(err)
	}
	// Another agent's rows full of the query's words must change nothing for agent a.
	var noise []Memory
	for i := range 50 {
		noise = append(noise, Memory{Text: fmt.Sprintf("fox fox brown quick %d", i)})
	}
	if _, err := s.AddMemories(ctx, "b", noise); err != nil {
		t.Fatal(err)
	}
	found, err := s.SearchMemories(ctx, "a", "quick fox", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range found {
		got = append(got, fmt.Sprintf("%s %.4f", m.Text, m.Score))
	}
	want := []string{
		"Fox news: the fox is quick 2.0197",
		"the quick brown fox jumps over the lazy dog 1.4696",
		"a fox, a fox, a fox in the henhouse 0.9991",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("search order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	docs := []Document{{ID: "d1", Title: "Brown", Content: "brown bread"}, {ID: "d2", Title: "Fox", Content: "the brown fox"},
		{ID: "d3", Title: "Other", Content: "cats"}}
	if _, err := s.AddDocuments(ctx, "a", docs); err != nil {
		t.Fatal(err)
	}
	// Replacing a document re-indexes its words.
	if _, err := s.AddDocuments(ctx, "a", []Document{{ID: "d3", Title: "Other", Content: "brown cats"}}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.FindDocuments(ctx, "a", "brown", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"d1", "d3", "d2"}) {
		t.Fatalf("document order %v", ids)
	}
	if ds, _ := s.FindDocuments(ctx, "b", "brown", nil, 10); len(ds) != 0 {
		t.Fatalf("agent b found agent a's documents: %+v", ds)
	}
}

// TestKnowledgeKeepsHostileText stores what hostile code may write (NUL bytes, invalid UTF-8,
// a very long word) and reads it back without failing the write.
func TestKnowledgeKeepsHostileText(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	long := strings.Repeat("x", 5000)
	if _, err := s.AddMemories(ctx, "a", []Memory{{Text: "nul\x00byte bad\xffutf8 " + long + " findme"}}); err != nil {
		t.Fatal(err)
	}
	found, err := s.SearchMemories(ctx, "a", "findme", 5)
	if err != nil || len(found) != 1 {
		t.Fatalf("search: %+v %v", found, err)
	}
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: time.Now(), Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	head.Outcome, head.Stdout = sandbox.OutcomeOK, "out\x00put \xfe"
	if err := s.Finish(ctx, head); err != nil {
		t.Fatal(err)
	}
	e, err := s.GetExecution(ctx, head.ID)
	if err != nil || !strings.HasPrefix(e.Stdout, "out") {
		t.Fatalf("record: %q %v", e.Stdout, err)
	}
}

// TestFilesServedByEveryHandle: a file one store handle keeps is served by another (on
// PostgreSQL, another daemon; on SQLite, the same data directory opened again).
func TestFilesServedByEveryHandle(t *testing.T) {
	s, f, dir := openFiles(t, 1<<20)
	id := begin(t, s, time.Now())
	if err := put(t, f, id, "out.txt", 3); err != nil {
		t.Fatal(err)
	}
	other := s
	if s.pg {
		var err error
		// The same schema through a second pool stands for another daemon.
		other, err = OpenPostgres(t.Context(), s.url, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
	}
	f2, err := other.OpenFiles(t.Context(), dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := f2.Open(t.Context(), id, "out.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if len(b) != 3 {
		t.Fatalf("read %q", b)
	}
}

// TestDaemonsRecoverExpiredLeases: a daemon's running records and claimed fires are its own;
// another daemon finalises them only once its heartbeat is older than the lease.
func TestDaemonsRecoverExpiredLeases(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	s.SetDaemon("d1")
	if err := s.Heartbeat(ctx, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCode(ctx, Code{Agent: "a", Name: "c", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(ctx, Job{ID: "job_1", Agent: "a", CodeName: "c", Schedule: "@every 10s", Timezone: "UTC",
		Input: json.RawMessage("null"), Enabled: true, Overlap: "skip", CatchUp: "skip", NextRunAt: &now}); err != nil {
		t.Fatal(err)
	}
	began := Fire{JobID: "job_1", Agent: "a", Kind: FireScheduled, Status: FireStarted, ScheduledAt: now, FiredAt: now, ExecutionID: sandbox.NewID()}
	fires, ok, err := s.ClaimFires(ctx, "job_1", now, now.Add(10*time.Second), []Fire{began})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if busy, err := s.JobBusy(ctx, "job_1"); err != nil || busy == "" {
		t.Fatalf("JobBusy after a started fire = %q, %v", busy, err)
	}
	head := sandbox.Result{ID: began.ExecutionID, Agent: "a", TimeoutMS: 1000, StartedAt: now, Origin: sandbox.Origin{Source: "job", JobID: "job_1"}}
	if err := s.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	if e, err := s.GetExecution(ctx, head.ID); err != nil || e.Daemon != "d1" {
		t.Fatalf("the record names daemon %q (%v), want d1", e.Daemon, err)
	}
	// Issue 33, item 15: the job's history names the daemon that fired it.
	if hist, _, err := s.ListFires(ctx, "a", "job_1", FireFilter{}, Page{}); err != nil || len(hist) != 1 || hist[0].Daemon != "d1" {
		t.Fatalf("the history: %+v, %v; want one fire by daemon d1", hist, err)
	}
	session := sandbox.SessionInfo{ID: "se_held", Agent: "a", State: sandbox.SessionActive, CreatedAt: now}
	if err := s.BeginSession(ctx, session); err != nil {
		t.Fatal(err)
	}
	// Within the lease nothing is recovered.
	now = now.Add(DefaultLease / 2)
	if n, err := s.RecoverExpired(ctx, DefaultLease); err != nil || n != 0 {
		t.Fatalf("RecoverExpired within the lease = %d, %v", n, err)
	}
	// Past it, another daemon finalises d1's run and its job is free again.
	now = now.Add(DefaultLease)
	s.SetDaemon("d2")
	// Another daemon asked for d1's open session says which daemon holds it, and where.
	info, err := s.LookupSession(ctx, session.ID)
	if info.Agent != "a" || errclass.Of(err) != errclass.NotFound || err == nil ||
		!strings.Contains(err.Error(), "daemon d1 at 127.0.0.1:1") {
		t.Fatalf("a session held by another daemon: %+v, %v", info, err)
	}
	if n, err := s.RecoverExpired(ctx, DefaultLease); err != nil || n != 1 {
		t.Fatalf("RecoverExpired past the lease = %d, %v", n, err)
	}
	// Past the lease, d1's session has ended with it.
	if info, err := s.LookupSession(ctx, session.ID); err != nil || info.EndReason != sandbox.EndDaemonStopped {
		t.Fatalf("d1's session after recovery: %+v, %v", info, err)
	}
	e, err := s.GetExecution(ctx, head.ID)
	if err != nil || e.Status != "finished" || e.Reason != ReasonInterrupted {
		t.Fatalf("record after recovery: %+v %v", e.Status, err)
	}
	if busy, err := s.JobBusy(ctx, "job_1"); err != nil || busy != "" {
		t.Fatalf("JobBusy after recovery = %q, %v", busy, err)
	}
	_ = fires
	// Two handles claiming the same fire: exactly one wins.
	next := now.Add(time.Second)
	if _, err := s.UpdateJob(ctx, Job{ID: "job_1", Agent: "a", CodeName: "c", Schedule: "@every 10s", Timezone: "UTC",
		Input: json.RawMessage("null"), Enabled: true, Overlap: "skip", CatchUp: "skip", NextRunAt: &next}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 6 {
		wg.Go(func() {
			f := Fire{JobID: "job_1", Agent: "a", Kind: FireScheduled, Status: FireStarted, ScheduledAt: next, FiredAt: next, ExecutionID: sandbox.NewID()}
			_, ok, err := s.ClaimFires(ctx, "job_1", next, next.Add(10*time.Second), []Fire{f})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d daemons claimed one fire", wins)
	}
}

// TestOverlapIsDecidedFromTheSharedLedger: a fire that would start while a run of its job goes
// on (whichever daemon runs it) is skipped or queued by the job's policy when it is recorded,
// and a queued fire is handed out once, when that run has ended.
func TestOverlapIsDecidedFromTheSharedLedger(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	s.SetDaemon("d1")
	if _, err := s.CreateCode(ctx, Code{Agent: "a", Name: "c", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, overlap := range []string{"skip", "queue"} {
		id := "job_" + overlap
		if _, err := s.CreateJob(ctx, Job{ID: id, Agent: "a", CodeName: "c", Schedule: "@every 10s", Timezone: "UTC",
			Input: json.RawMessage("null"), Enabled: true, Overlap: overlap, CatchUp: "skip", NextRunAt: &at}); err != nil {
			t.Fatal(err)
		}
		claim := func(n int) Fire {
			t.Helper()
			due := at.Add(time.Duration(n) * 10 * time.Second)
			f := Fire{JobID: id, Agent: "a", Kind: FireScheduled, Status: FireStarted, ScheduledAt: due, FiredAt: due, ExecutionID: sandbox.NewID()}
			fires, ok, err := s.ClaimFires(ctx, id, due, due.Add(10*time.Second), []Fire{f})
			if err != nil || !ok || len(fires) != 1 {
				t.Fatalf("claim %d: %v %v %v", n, fires, ok, err)
			}
			return fires[0]
		}
		first := claim(0)
		if first.Status != FireStarted {
			t.Fatalf("%s: the first fire is %s", overlap, first.Status)
		}
		second, third := claim(1), claim(2)
		want := []string{FireSkipped, FireSkipped}
		if overlap == "queue" {
			want = []string{FireQueued, FireSkipped}
		}
		if second.Status != want[0] || third.Status != want[1] || second.ExecutionID != "" {
			t.Fatalf("%s: fires while the first runs: %+v %+v", overlap, second, third)
		}
		if overlap != "queue" {
			continue
		}
		if ok, err := s.StartQueued(ctx, second.ID, id, sandbox.NewID()); err != nil || ok {
			t.Fatalf("a queued fire started while the first run goes on: %v %v", ok, err)
		}
		head := sandbox.Result{ID: first.ExecutionID, Agent: "a", TimeoutMS: 1000, StartedAt: at, Origin: sandbox.Origin{Source: "job", JobID: id}}
		if err := s.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
			t.Fatal(err)
		}
		head.Outcome = sandbox.OutcomeOK
		if err := s.Finish(ctx, head); err != nil {
			t.Fatal(err)
		}
		exec := sandbox.NewID()
		if ok, err := s.StartQueued(ctx, second.ID, id, exec); err != nil || !ok {
			t.Fatalf("the queued fire did not start after the run ended: %v %v", ok, err)
		}
		if ok, _ := s.StartQueued(ctx, second.ID, id, sandbox.NewID()); ok {
			t.Fatal("a queued fire was handed out twice")
		}
		if busy, _ := s.JobBusy(ctx, id); busy != exec {
			t.Fatalf("JobBusy = %q, want the queued fire's run %s", busy, exec)
		}
	}
}

// TestNotebookResultsAreKept: a run's notebook results, error and execution count are kept
// with its record, read back as they were, and counted in its bytes (ledger_max_bytes).
func TestNotebookResultsAreKept(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	finish := func(res sandbox.Result) int64 {
		t.Helper()
		res.ID, res.Agent, res.TimeoutMS, res.StartedAt, res.Origin = sandbox.NewID(), "a", 1000, time.Now(), sandbox.Origin{Source: "api"}
		if err := s.Begin(ctx, sandbox.Spec{ID: res.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, res); err != nil {
			t.Fatal(err)
		}
		before := s.LedgerBytes()
		res.Outcome = sandbox.OutcomeError
		if err := s.Finish(ctx, res); err != nil {
			t.Fatal(err)
		}
		e, err := s.GetExecution(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal([]any{e.Results, e.Error, e.ExecutionCount})
		want, _ := json.Marshal([]any{res.Results, res.Error, res.ExecutionCount})
		if string(got) != string(want) {
			t.Fatalf("read back %s, want %s", got, want)
		}
		return s.LedgerBytes() - before
	}
	plain := finish(sandbox.Result{})
	html := strings.Repeat("<td>1</td>", 1000)
	rich := finish(sandbox.Result{ExecutionCount: 3, Results: []sandbox.Display{
		{Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"<b>"`), "text/html": json.RawMessage(`"` + html + `"`)}},
		{Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"42"`), "application/json": json.RawMessage(`{"k":[1,2]}`)},
			IsMainResult: true, ExecutionCount: 3, Note: "n"},
	}, Error: &sandbox.ExecError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback ...\n"}})
	if rich-plain < int64(len(html)) {
		t.Fatalf("the record with results counts %d bytes more than one without; its HTML alone is %d", rich-plain, len(html))
	}
}

// TestExecutionTemplatesAreKept: the template a run's sandbox started from is in its record, as
// read and as listed, and selects the runs of that template only.
func TestExecutionTemplatesAreKept(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	run := func(o sandbox.Origin) string {
		t.Helper()
		res := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: time.Now(), Origin: o}
		if err := s.Begin(ctx, sandbox.Spec{ID: res.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, res); err != nil {
			t.Fatal(err)
		}
		res.Outcome = sandbox.OutcomeOK
		if err := s.Finish(ctx, res); err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	mine := run(sandbox.Origin{Source: sandbox.SourceAPI, Template: "reports", TemplateVersion: 3})
	shared := run(sandbox.Origin{Source: sandbox.SourceAPI, Template: "ops/latex", TemplateVersion: 1})
	plain := run(sandbox.Origin{Source: sandbox.SourceAPI})
	tagged := run(sandbox.Origin{Source: sandbox.SourceAPI, Template: "ops/latex:stable", TemplateVersion: 1})
	run(sandbox.Origin{Source: sandbox.SourceAPI, Template: "ops/latex2", TemplateVersion: 1})
	for id, want := range map[string][2]any{mine: {"reports", 3}, shared: {"ops/latex", 1}, plain: {"", 0}} {
		e, err := s.GetExecution(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]any{e.Template, e.TemplateVersion}; got != want {
			t.Errorf("execution %s read back with template %v, want %v", id, got, want)
		}
	}
	list, _, err := s.ListExecutions(ctx, ExecutionFilter{Template: "ops/latex"}, Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != tagged || list[1].ID != shared || list[1].Template != "ops/latex" || list[1].TemplateVersion != 1 {
		t.Fatalf("template=ops/latex listed %+v, want %s (of its tag) and %s, not ops/latex2's", list, tagged, shared)
	}
	if list, _, err := s.ListExecutions(ctx, ExecutionFilter{Template: "ops/latex:stable"}, Page{}); err != nil || len(list) != 1 || list[0].ID != tagged {
		t.Fatalf("template=ops/latex:stable listed %+v, %v; want %s only", list, err, tagged)
	}
	all, _, err := s.ListExecutions(ctx, ExecutionFilter{}, Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if e.ID == plain && e.Template != "" {
			t.Errorf("the run on the daemon's own image is listed with template %q", e.Template)
		}
	}
}

// TestTemplateVersionsAndTags: a template's kept versions and tags round-trip; a tag names only
// a kept version (checked with the write), a version's removal takes its tags, an image is
// in use while a kept version names it, and the template's removal takes all of them.
func TestTemplateVersionsAndTags(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.PutTemplate(ctx, template.Template{Agent: "a", Name: "env", Version: 2, Status: template.StatusReady, Image: "img2", LayerImage: "layer2", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		v := template.Version{Version: n, Spec: template.Spec{Env: map[string]string{"V": fmt.Sprint(n)}}, Hash: fmt.Sprintf("h%d", n),
			Image: fmt.Sprintf("img%d", n), LayerImage: fmt.Sprintf("layer%d", n), SizeBytes: int64(n) << 20, Shared: n == 2, CreatedAt: now}
		if err := s.PutTemplateVersion(ctx, "a", "env", v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetTemplateTag(ctx, "a", "env", "stable", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTemplateTag(ctx, "a", "env", "gone", 7); !errors.Is(err, template.ErrNotFound) {
		t.Errorf("a tag of a version not kept: %v, want ErrNotFound", err)
	}
	vs, err := s.TemplateVersions(ctx, "a", "env")
	if err != nil || len(vs) != 2 || vs[0].Version != 2 || vs[1].Version != 1 || fmt.Sprint(vs[1].Tags) != "[stable]" ||
		vs[1].Spec.Env["V"] != "1" || vs[1].Image != "img1" || vs[1].SizeBytes != 1<<20 || !vs[1].CreatedAt.Equal(now) || !vs[0].Shared || vs[1].Shared {
		t.Fatalf("versions %+v, %v", vs, err)
	}
	if n, err := s.TemplateImageUsers(ctx, "img1"); err != nil || n != 1 {
		t.Errorf("users of a kept version's image: %d, %v", n, err)
	}
	if err := s.DeleteTemplateVersion(ctx, "a", "env", 1); err != nil {
		t.Fatal(err)
	}
	if tags, err := s.TemplateTags(ctx, "a", "env"); err != nil || len(tags) != 0 {
		t.Errorf("tags after their version went: %v, %v", tags, err)
	}
	if err := s.DeleteTemplateVersion(ctx, "a", "env", 1); !errors.Is(err, template.ErrNotFound) {
		t.Errorf("removing a version twice: %v", err)
	}
	if n, _ := s.TemplateImageUsers(ctx, "img1"); n != 0 {
		t.Errorf("a removed version's image still counts %d users", n)
	}
	if err := s.SetTemplateTag(ctx, "a", "env", "prod", 2); err != nil {
		t.Fatal(err)
	}
	// Saved code naming a tag or a version of the template names the template; a template
	// whose name merely starts the same is another's.
	for _, c := range []Code{{Agent: "a", Name: "tagged", Code: "x", Template: "env:prod"}, {Agent: "b", Name: "pinned", Code: "x", Template: "a/env:2"},
		{Agent: "a", Name: "other", Code: "x", Template: "env2"}, {Agent: "b", Name: "own", Code: "x", Template: "env:prod"}} {
		if _, err := s.CreateCode(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if users, err := s.CodeNamingTemplate(ctx, "a", "env"); err != nil || fmt.Sprint(users) != "[a/tagged b/pinned]" {
		t.Errorf("the code naming a/env: %v, %v; want a/tagged and b/pinned", users, err)
	}
	if err := s.DeleteTemplate(ctx, "a", "env"); err != nil {
		t.Fatal(err)
	}
	vs, _ = s.TemplateVersions(ctx, "a", "env")
	tags, _ := s.TemplateTags(ctx, "a", "env")
	if len(vs) != 0 || len(tags) != 0 {
		t.Errorf("after the template's removal: versions %v, tags %v", vs, tags)
	}
}
