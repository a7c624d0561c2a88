package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// openFiles returns a store keeping files under quota, and the files' directory.
func openFiles(t *testing.T, quota int64) (*Store, *Files, string) {
	t.Helper()
	s := open(t)
	dir := filepath.Join(t.TempDir(), FilesDir)
	f, err := s.OpenFiles(t.Context(), dir, quota)
	if err != nil {
		t.Fatal(err)
	}
	return s, f, dir
}

// begin records a running execution started at at.
func begin(t *testing.T, s *Store, at time.Time) string {
	t.Helper()
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: at, Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(t.Context(), sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	return head.ID
}

func put(t *testing.T, f *Files, id, name string, n int) error {
	t.Helper()
	return f.Put(t.Context(), id, sandbox.File{Name: name, SizeBytes: int64(n)}, []byte(strings.Repeat("x", n)))
}

func read(t *testing.T, f *Files, id, name string) (string, error) {
	t.Helper()
	rc, err := f.Open(t.Context(), id, name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func TestFilesPutAndOpen(t *testing.T) {
	s, f, dir := openFiles(t, 1<<20)
	id := begin(t, s, time.Now())
	if err := f.Put(t.Context(), id, sandbox.File{Name: "a/b.csv"}, []byte("1,2\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(t.Context(), id, sandbox.File{Name: "empty"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := read(t, f, id, "a/b.csv"); err != nil || got != "1,2\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	if got, err := read(t, f, id, "empty"); err != nil || got != "" {
		t.Fatalf("read the empty file: %q, %v", got, err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, id))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "0,1" {
		t.Errorf("files on disk %v, want 0 and 1 (by index, no temporary file left)", names)
	}
	if _, err := read(t, f, id, "missing"); !errors.Is(err, ErrEvicted) {
		t.Errorf("a file not kept: %v, want ErrEvicted", err)
	}
	for _, bad := range []struct{ id, name string }{{"../x", "a"}, {id, "../a"}, {id, "/etc/passwd"}} {
		if err := f.Put(t.Context(), bad.id, sandbox.File{Name: bad.name}, []byte("x")); err == nil {
			t.Errorf("Put(%q, %q) kept it", bad.id, bad.name)
		}
	}
	if used, quota := f.Used(); used != chargeOf(4)+chargeOf(0) || quota != 1<<20 {
		t.Errorf("used %d of %d", used, quota)
	}
	// A file cut short on disk (a power loss before the bytes reached it) is not served.
	if err := os.Truncate(filepath.Join(dir, id, "0"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := read(t, f, id, "a/b.csv"); !errors.Is(err, ErrEvicted) {
		t.Errorf("a short file: %v, want ErrEvicted", err)
	}
}

// BenchmarkFilesPut stores a 30 KiB chart per run, as a run with one figure does.
func BenchmarkFilesPut(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	f, err := s.OpenFiles(b.Context(), filepath.Join(b.TempDir(), FilesDir), 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	png := make([]byte, 30<<10)
	for b.Loop() {
		id := sandbox.NewID()
		if err := f.Put(b.Context(), id, sandbox.File{Name: "figure-1.png"}, png); err != nil {
			b.Fatal(err)
		}
	}
}

// The quota evicts the files of the executions that started first, whatever order their files
// were stored in, and never the storing execution's own.
func TestFilesQuotaEvictsTheOldestExecutionsFirst(t *testing.T) {
	const B = fileBlockBytes // a file of n blocks is charged n+1
	s, f, dir := openFiles(t, 10*B)
	now := time.Now()
	oldest, older, newer := begin(t, s, now.Add(-3*time.Hour)), begin(t, s, now.Add(-2*time.Hour)), begin(t, s, now.Add(-time.Hour))
	for _, id := range []string{newer, older, oldest} { // stored newest first
		if err := put(t, f, id, "f", 2*B); err != nil {
			t.Fatal(err)
		}
	}
	current := begin(t, s, now)
	if err := put(t, f, current, "a", 2*B); err != nil { // 12 > 10 blocks: oldest goes
		t.Fatal(err)
	}
	if _, err := read(t, f, oldest, "f"); !errors.Is(err, ErrEvicted) {
		t.Errorf("oldest: %v, want evicted", err)
	}
	if _, err := os.Stat(filepath.Join(dir, oldest)); !os.IsNotExist(err) {
		t.Errorf("the oldest's directory is still there: %v", err)
	}
	for _, id := range []string{older, newer} {
		if _, err := read(t, f, id, "f"); err != nil {
			t.Errorf("%s evicted before the oldest had gone: %v", id, err)
		}
	}
	if err := put(t, f, current, "b", 5*B); err != nil { // 15 blocks: older and newer go
		t.Fatal(err)
	}
	for _, id := range []string{older, newer} {
		if _, err := read(t, f, id, "f"); !errors.Is(err, ErrEvicted) {
			t.Errorf("%s: %v, want evicted", id, err)
		}
	}
	if err := put(t, f, current, "c", B); err == nil || !strings.Contains(err.Error(), "files_max_bytes") {
		t.Errorf("a file that fits only by evicting the run's own: %v, want an error naming files_max_bytes", err)
	}
	if err := put(t, f, newer, "huge", 10*B); err == nil || !strings.Contains(err.Error(), "files_max_bytes") {
		t.Errorf("a file over the whole quota: %v", err)
	}
	if got, err := read(t, f, current, "b"); err != nil || len(got) != 5*B {
		t.Errorf("the current run's file: %d bytes, %v", len(got), err)
	}
	if used, _ := f.Used(); used != 9*B {
		t.Errorf("used %d, want %d", used, 9*B)
	}
}

// Pruning a record and discarding one delete their files; a store opened again counts what is
// kept and removes directories that belong to no execution.
func TestFilesGoWithTheirRecords(t *testing.T) {
	s, f, dir := openFiles(t, 1<<20)
	now := time.Now()
	old, kept, discarded := begin(t, s, now.Add(-48*time.Hour)), begin(t, s, now), begin(t, s, now)
	for _, id := range []string{old, kept, discarded} {
		if err := put(t, f, id, "f", 10); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{old, kept} {
		if err := s.Finish(t.Context(), sandbox.Result{ID: id, Agent: "a", Outcome: sandbox.OutcomeOK, Files: []sandbox.File{{Name: "f", SizeBytes: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Discard(t.Context(), discarded); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(t.Context(), Retention{MaxAge: 24 * time.Hour}); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	for _, id := range []string{old, discarded} {
		if _, err := os.Stat(filepath.Join(dir, id)); !os.IsNotExist(err) {
			t.Errorf("%s's files are still on disk: %v", id, err)
		}
		if _, err := read(t, f, id, "f"); !errors.Is(err, ErrEvicted) {
			t.Errorf("%s's file is still kept: %v", id, err)
		}
	}
	if got, err := read(t, f, kept, "f"); err != nil || len(got) != 10 {
		t.Errorf("kept record's file: %q, %v", got, err)
	}
	if used, _ := f.Used(); used != chargeOf(10) {
		t.Errorf("used %d, want %d", used, chargeOf(10))
	}
	rec, err := s.GetExecution(t.Context(), kept)
	if err != nil || len(rec.Files) != 1 || rec.Files[0].Name != "f" {
		t.Errorf("record files %+v, %v", rec.Files, err)
	}

	// A crash left a directory of an execution with no record.
	stray := filepath.Join(dir, sandbox.NewID())
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	again, err := s.OpenFiles(t.Context(), dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if used, _ := again.Used(); used != chargeOf(10) {
		t.Errorf("reopened: used %d, want %d", used, chargeOf(10))
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("a directory of no execution survived reopening: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
		t.Errorf("a kept execution's directory went: %v", err)
	}
}

func TestJobFilesAreKept(t *testing.T) {
	s := open(t)
	if _, err := s.CreateCode(t.Context(), Code{Agent: "a", Name: "c", Code: "x", Dependencies: []string{}}); err != nil {
		t.Fatal(err)
	}
	off := false
	j, err := s.CreateJob(t.Context(), Job{ID: "job_1", Agent: "a", CodeName: "c", Schedule: "@daily", Timezone: "UTC", Input: json.RawMessage("null"),
		Overlap: "skip", CatchUp: "skip", Charts: &off, Inputs: []sandbox.InputFile{{Name: "a", Content: []byte{0, 0xff}}, {Name: "e", Content: nil}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Files) != 2 || j.Files[0] != (JobFile{"a", 2}) || j.Files[1] != (JobFile{"e", 0}) {
		t.Errorf("created files %+v", j.Files)
	}
	got, err := s.GetJob(t.Context(), "a", "job_1")
	if err != nil || len(got.Inputs) != 2 || string(got.Inputs[0].Content) != "\x00\xff" || got.Inputs[1].Content == nil ||
		got.Charts == nil || *got.Charts {
		t.Fatalf("read back %+v, %v", got, err)
	}
	list, _, err := s.ListJobs(t.Context(), "a", Page{})
	if err != nil || len(list) != 1 || len(list[0].Files) != 2 || list[0].Inputs != nil {
		t.Fatalf("listed %+v, %v: want the files described, their bytes not loaded", list, err)
	}
	got.Inputs = nil
	if _, err := s.UpdateJob(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetJob(t.Context(), "a", "job_1"); len(got.Files) != 0 {
		t.Errorf("files after an update without them: %+v", got.Files)
	}
}

// A file is charged as the disk holds it: runs of empty and one-byte files filled the disk's
// blocks and inodes while the quota, counting bytes, saw next to nothing (a trial attack).
func TestFilesChargeBlocksAndOverhead(t *testing.T) {
	for size, want := range map[int64]int64{0: 4096, 1: 8192, 4096: 8192, 4097: 12288} {
		if got := chargeOf(size); got != want {
			t.Errorf("chargeOf(%d) = %d, want %d", size, got, want)
		}
	}
	_, f, _ := openFiles(t, 64*4096)
	id := sandbox.NewID()
	n := 0
	for ; n < 100; n++ {
		if err := put(t, f, id, fmt.Sprintf("empty-%d", n), 0); err != nil {
			break
		}
	}
	if n != 64 {
		t.Errorf("%d empty files kept under a quota of 64 blocks, want 64", n)
	}
}

// TestJobQuotas: jobs per agent, jobs in all and the bytes of all jobs' files are capped (a
// hostile client made hundreds of jobs with 16 MiB of files each and took the daemon to
// gigabytes of memory); a refusal is a *QuotaError of class too large naming the setting, and
// an edit that does not grow a job's files passes even over a quota lowered since.
func TestJobQuotas(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	s.SetQuotas(Quotas{ResultsMaxBytes: 1 << 20, ResultsMaxVersions: 10, JobsPerAgent: 2, JobsMax: 3, JobFilesMaxBytes: 10})
	for _, agent := range []string{"a", "b"} {
		if _, err := s.CreateCode(ctx, Code{Agent: agent, Name: "c", Code: "x", Dependencies: []string{}}); err != nil {
			t.Fatal(err)
		}
	}
	job := func(agent, id string, files int) error {
		var in []sandbox.InputFile
		if files > 0 {
			in = []sandbox.InputFile{{Name: "f", Content: make([]byte, files)}}
		}
		_, err := s.CreateJob(ctx, Job{ID: id, Agent: agent, CodeName: "c", Schedule: "@daily", Timezone: "UTC", Input: json.RawMessage("null"),
			Overlap: "skip", CatchUp: "skip", Inputs: in})
		return err
	}
	setting := func(err error) string {
		var q *QuotaError
		if !errors.As(err, &q) || errclass.Of(err) != errclass.TooLarge {
			return fmt.Sprint(err)
		}
		return q.Setting
	}
	if err := job("a", "job_1", 6); err != nil {
		t.Fatal(err)
	}
	if got := setting(job("a", "job_2", 6)); got != "job_files_max_bytes" {
		t.Errorf("files past the quota: %s", got)
	}
	if err := job("a", "job_2", 4); err != nil {
		t.Fatal(err)
	}
	if got := setting(job("a", "job_3", 0)); got != "jobs_per_agent" {
		t.Errorf("a third job of one agent: %s", got)
	}
	if err := job("b", "job_3", 0); err != nil {
		t.Fatal(err)
	}
	if got := setting(job("b", "job_4", 0)); got != "jobs_max" {
		t.Errorf("a fourth job in all: %s", got)
	}
	s.SetQuotas(Quotas{ResultsMaxBytes: 1 << 20, ResultsMaxVersions: 10, JobsPerAgent: 2, JobsMax: 3, JobFilesMaxBytes: 1})
	j, err := s.GetJob(ctx, "a", "job_1")
	if err != nil {
		t.Fatal(err)
	}
	j.Description = "paused"
	if _, err := s.UpdateJob(ctx, j); err != nil {
		t.Errorf("an edit that keeps the files, over a lowered quota: %v", err)
	}
}

// TestFilesStreamInParts: Open answers a ReadSeeker that never holds the whole file (on
// PostgreSQL, parts of blobPart bytes): a 3-part file reads back whole, from an offset, and
// its end by SeekEnd. Before, PostgreSQL read the whole bytea into memory for each download,
// so 80 stalled downloads of an 8 MiB file held 1 GB (H50).
func TestFilesStreamInParts(t *testing.T) {
	s, f, _ := openFiles(t, 64<<20)
	id := begin(t, s, time.Now())
	want := make([]byte, 2*blobPart+1234)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if err := f.Put(t.Context(), id, sandbox.File{Name: "big.bin"}, want); err != nil {
		t.Fatal(err)
	}
	rc, err := f.Open(t.Context(), id, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rs, ok := rc.(io.ReadSeeker)
	if !ok {
		t.Fatalf("Open answered a %T, not an io.ReadSeeker", rc)
	}
	buf := make([]byte, 4*blobPart)
	n, err := rs.Read(buf)
	if err != nil || n == 0 || string(buf[:n]) != string(want[:n]) || (onPostgres(t) && n > blobPart) {
		t.Fatalf("the first Read gave %d bytes (%v); want them matching (at most %d on PostgreSQL)", n, err, blobPart)
	}
	if size, err := rs.Seek(0, io.SeekEnd); err != nil || size != int64(len(want)) {
		t.Fatalf("SeekEnd: %d, %v; want %d", size, err, len(want))
	}
	if _, err := rs.Seek(blobPart-10, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rs)
	if err != nil || string(rest) != string(want[blobPart-10:]) {
		t.Fatalf("read from an offset: %d bytes, %v; want %d matching", len(rest), err, len(want)-(blobPart-10))
	}
}

// TestJobSecretsAreKept: a job's secrets' names are stored, read back, listed and replaced
// (none: nil).
func TestJobSecretsAreKept(t *testing.T) {
	s := open(t)
	if _, err := s.CreateCode(t.Context(), Code{Agent: "a", Name: "c", Code: "x", Dependencies: []string{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(t.Context(), Job{ID: "job_1", Agent: "a", CodeName: "c", Schedule: "@daily", Timezone: "UTC", Input: json.RawMessage("null"),
		Overlap: "skip", CatchUp: "skip", Secrets: []string{"API_KEY", "GH_2"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetJob(t.Context(), "a", "job_1")
	if err != nil || !slices.Equal(got.Secrets, []string{"API_KEY", "GH_2"}) {
		t.Fatalf("read back %v, %v", got.Secrets, err)
	}
	if list, _, err := s.ListJobs(t.Context(), "a", Page{}); err != nil || len(list) != 1 || !slices.Equal(list[0].Secrets, got.Secrets) {
		t.Fatalf("listed %+v, %v", list, err)
	}
	got.Secrets = nil
	if _, err := s.UpdateJob(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetJob(t.Context(), "a", "job_1"); got.Secrets != nil {
		t.Errorf("secrets after an update without them: %q", got.Secrets)
	}
}
