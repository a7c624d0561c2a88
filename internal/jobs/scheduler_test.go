package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// sleepRuntime "runs" code for INPUT["sleep_s"] seconds of (fake) time and tracks how many
// runs of each job overlap.
type sleepRuntime struct {
	mu      sync.Mutex
	now     int
	maxSeen int
}

func (r *sleepRuntime) Ready(context.Context) error { return nil }
func (r *sleepRuntime) Run(ctx context.Context, _ int, spec sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	var in struct {
		SleepS int `json:"sleep_s"`
	}
	_ = json.Unmarshal(spec.Input, &in)
	r.mu.Lock()
	r.now++
	r.maxSeen = max(r.maxSeen, r.now)
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.now--; r.mu.Unlock() }()
	start := time.Now()
	select {
	case <-time.After(time.Duration(in.SleepS) * time.Second):
	case <-ctx.Done():
		return sandbox.Result{Outcome: sandbox.OutcomeKilled, StartedAt: start.UTC()}, ctx.Err()
	}
	return sandbox.Result{Outcome: sandbox.OutcomeOK, StartedAt: start.UTC(), DurationMS: time.Since(start).Milliseconds(), Output: json.RawMessage(`1`)}, nil
}

type env struct {
	st  *store.Store
	lib *library.Library
	svc *engine.Service
	rt  *sleepRuntime
}

// newEnv opens a store in dir and saves the code "work" for agent "a".
func newEnv(t *testing.T, dir string) *env {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(dir, store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := &sleepRuntime{}
	cfg := engine.DefaultConfig()
	cfg.Slots = 8
	svc := engine.NewService(rt, engine.Hooks{Recorder: st}, cfg, nil)
	lib := library.New(st, svc, 0)
	if _, err := lib.Create(context.Background(), "a", "work", library.Draft{Code: "pass"}); err != nil && !errors.Is(err, store.ErrExists) {
		t.Fatal(err)
	}
	return &env{st: st, lib: lib, svc: svc, rt: rt}
}

// start runs a scheduler until the returned stop is called.
func (e *env) start(cfg jobs.Config) (*jobs.Scheduler, func()) {
	s := jobs.New(e.st, e.lib, e.svc, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	return s, func() { cancel(); <-done }
}

func history(t *testing.T, st *store.Store, id string) []store.Fire {
	t.Helper()
	fires, _, err := st.ListFires(context.Background(), "a", id, store.FireFilter{}, store.Page{Limit: store.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	// Oldest first.
	for i, j := 0, len(fires)-1; i < j; i, j = i+1, j-1 {
		fires[i], fires[j] = fires[j], fires[i]
	}
	return fires
}

func count(fires []store.Fire, status string) int {
	n := 0
	for _, f := range fires {
		if f.Status == status {
			n++
		}
	}
	return n
}

func TestEvery10sFiresOnScheduleIntoTheLedger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		job, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "@every 10s", Input: json.RawMessage(`{"sleep_s": 1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if len(job.NextFires) != 5 || job.NextFires[1].Sub(job.NextFires[0]) != 10*time.Second {
			t.Fatalf("next fires: %v", job.NextFires)
		}
		time.Sleep(65 * time.Second)
		synctest.Wait()
		stop()
		fires := history(t, e.st, job.ID)
		if len(fires) != 6 || count(fires, store.FireStarted) != 6 {
			t.Fatalf("%d fires in 65 s of @every 10s, want 6 started: %+v", len(fires), fires)
		}
		for i, f := range fires {
			if want := job.NextFires[0].Add(time.Duration(i) * 10 * time.Second); !f.ScheduledAt.Equal(want) {
				t.Errorf("fire %d scheduled at %v, want %v", i, f.ScheduledAt, want)
			}
			rec, err := e.st.GetExecution(context.Background(), f.ExecutionID)
			if err != nil || rec.Source != sandbox.SourceJob || rec.JobID != job.ID || rec.CodeName != "work" || rec.Outcome != sandbox.OutcomeOK {
				t.Errorf("fire %d's execution in the ledger: %+v, %v", i, rec, err)
			}
			if f.Outcome != "ok" {
				t.Errorf("fire %d's outcome in the history: %q", i, f.Outcome)
			}
		}
	})
}

// H23: a job every 10 s whose script runs 25 s, overlap skip: no pile-up; every fire is
// recorded as run or skipped.
func TestOverlapSkipNeverPilesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		job, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "@every 10s", Input: json.RawMessage(`{"sleep_s": 25}`)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(105 * time.Second)
		synctest.Wait()
		stop()
		fires := history(t, e.st, job.ID)
		// Fires at 10..100 s: runs start at 10, 40, 70, 100 (each ends 25 s later).
		if len(fires) != 10 || count(fires, store.FireStarted) != 4 || count(fires, store.FireSkipped) != 6 {
			t.Fatalf("fires: %d started, %d skipped of %d; want 4, 6 of 10", count(fires, store.FireStarted), count(fires, store.FireSkipped), len(fires))
		}
		if e.rt.maxSeen != 1 {
			t.Fatalf("%d runs of the job overlapped", e.rt.maxSeen)
		}
	})
}

func TestOverlapQueueKeepsOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		job, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "@every 10s", Overlap: "queue", Input: json.RawMessage(`{"sleep_s": 25}`)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(45 * time.Second)
		synctest.Wait()
		// 10: run A (to 35); 20: queued; 30: skipped (one waits already); 35: the queued one
		// starts (to 60); 40: queued.
		fires := history(t, e.st, job.ID)
		got := []string{}
		for _, f := range fires {
			got = append(got, f.Status)
		}
		want := []string{"started", "started", "skipped", "queued"}
		if len(got) != len(want) {
			t.Fatalf("statuses %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("statuses %v, want %v", got, want)
			}
		}
		time.Sleep(60 * time.Second)
		synctest.Wait()
		stop()
		if e.rt.maxSeen != 1 {
			t.Fatalf("%d runs of the job overlapped", e.rt.maxSeen)
		}
	})
}

func TestRestartNeitherLosesNorDoubles(t *testing.T) {
	for _, catchUp := range []string{"skip", "once"} {
		t.Run(catchUp, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				e := newEnv(t, dir)
				cfg := jobs.Config{Lateness: time.Second}
				s, stop := e.start(cfg)
				job, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "@every 10s", CatchUp: catchUp, Input: json.RawMessage(`{"sleep_s": 1}`)})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(35 * time.Second) // fires at 10, 20, 30
				synctest.Wait()
				stop()
				e.st.Close()

				// A quick restart (5 s): nothing is missed.
				time.Sleep(5 * time.Second)
				e = newEnv(t, dir)
				_, stop = e.start(cfg)
				time.Sleep(15 * time.Second) // fires at 40, 50
				synctest.Wait()
				stop()
				e.st.Close()

				// A long stop (5 min): the fires of that time are missed, by the policy.
				time.Sleep(5 * time.Minute)
				e = newEnv(t, dir)
				defer e.st.Close()
				_, stop = e.start(cfg)
				time.Sleep(10 * time.Second) // fires at 360
				synctest.Wait()
				stop()

				fires := history(t, e.st, job.ID)
				seen := map[time.Time]bool{}
				for _, f := range fires[:5] {
					if f.Status != store.FireStarted || seen[f.ScheduledAt] {
						t.Fatalf("before the long stop: %+v", fires)
					}
					seen[f.ScheduledAt] = true
				}
				after := fires[5:]
				// Down from 55 s to 355 s: fires at 60..350 (30) are missed (all more than the
				// lateness of 1 s late).
				switch catchUp {
				case "skip":
					if after[0].Status != store.FireMissed || after[0].Missed != 30 || count(after[1:], store.FireStarted) != len(after)-1 {
						t.Fatalf("after the long stop: %+v", after)
					}
				case "once":
					if after[0].Status != store.FireStarted || after[0].Kind != store.FireCatchUp || after[0].Missed != 30 || count(after, store.FireStarted) != len(after) {
						t.Fatalf("after the long stop: %+v", after)
					}
				}
				if len(after) != 2 {
					t.Fatalf("after the long stop want the missed entry and the fire at 360 s: %+v", after)
				}
			})
		})
	}
}

// A daily 09:00 job in Europe/Berlin fires at 08:00 UTC in winter and 07:00 UTC in summer; a
// 02:30 job in America/New_York fires once on the day 02:30 does not exist, and once on the
// day it happens twice.
func TestDaylightSaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		berlin, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "0 9 * * *", Timezone: "Europe/Berlin"})
		if err != nil {
			t.Fatal(err)
		}
		ny, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "30 2 * * *", Timezone: "America/New_York"})
		if err != nil {
			t.Fatal(err)
		}
		// Fake time starts on 2000-01-01; run to 2000-11-01 (past both changes each way).
		time.Sleep(time.Date(2000, 11, 1, 0, 0, 0, 0, time.UTC).Sub(time.Now()))
		synctest.Wait()
		stop()

		byDay := func(fires []store.Fire, loc *time.Location) map[string]int {
			m := map[string]int{}
			for _, f := range fires {
				if f.Status != store.FireStarted {
					t.Fatalf("fire %+v did not start", f)
				}
				m[f.ScheduledAt.In(loc).Format("2006-01-02")]++
			}
			return m
		}
		bf := history(t, e.st, berlin.ID)
		for _, f := range bf {
			want := 8
			if f.ScheduledAt.After(time.Date(2000, 3, 26, 1, 0, 0, 0, time.UTC)) && f.ScheduledAt.Before(time.Date(2000, 10, 29, 1, 0, 0, 0, time.UTC)) {
				want = 7
			}
			if f.ScheduledAt.Hour() != want {
				t.Fatalf("Berlin 09:00 fired at %v UTC", f.ScheduledAt)
			}
		}
		if days := byDay(bf, time.UTC); len(days) != 305 || len(bf) != 305 {
			t.Fatalf("Berlin: %d fires on %d days, want 305 on 305", len(bf), len(days))
		}
		newYork, _ := time.LoadLocation("America/New_York")
		nf := history(t, e.st, ny.ID)
		days := byDay(nf, newYork)
		for _, day := range []string{"2000-04-02", "2000-10-29"} { // spring forward, fall back
			if days[day] != 1 {
				t.Errorf("New York 02:30 fired %d times on %s, want 1", days[day], day)
			}
		}
		if len(nf) != 305 {
			t.Errorf("New York: %d fires, want 305", len(nf))
		}
	})
}

func TestRunNowAndPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		defer stop()
		ctx := context.Background()
		job, err := s.Create(ctx, "a", jobs.Draft{CodeName: "work", Schedule: "@hourly", Input: json.RawMessage(`{"sleep_s": 30}`)})
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.RunNow(ctx, "a", job.ID)
		if err != nil || f.Status != store.FireStarted || f.Kind != store.FireManual {
			t.Fatalf("run now: %+v %v", f, err)
		}
		if f2, _ := s.RunNow(ctx, "a", job.ID); f2.Status != store.FireSkipped {
			t.Fatalf("second run now while the first runs: %+v", f2)
		}
		paused, err := s.SetEnabled(ctx, "a", job.ID, false)
		if err != nil || paused.Enabled || paused.NextRunAt != nil || len(paused.NextFires) != 0 {
			t.Fatalf("paused: %+v %v", paused, err)
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if n := len(history(t, e.st, job.ID)); n != 2 {
			t.Fatalf("a paused job fired: %d fires", n)
		}
		resumed, err := s.SetEnabled(ctx, "a", job.ID, true)
		if err != nil || !resumed.Enabled || resumed.NextRunAt == nil {
			t.Fatalf("resumed: %+v %v", resumed, err)
		}
		if _, err := s.RunNow(ctx, "b", job.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another agent ran the job: %v", err)
		}
	})
}

func TestCreateRefusesBadJobs(t *testing.T) {
	e := newEnv(t, t.TempDir())
	defer e.st.Close()
	if _, err := e.lib.Create(t.Context(), "a", "typed", library.Draft{Code: "pass", InputSchema: json.RawMessage(`{"type": "object", "required": ["n"]}`)}); err != nil {
		t.Fatal(err)
	}
	s := jobs.New(e.st, e.lib, e.svc, jobs.Config{}, nil)
	cases := []struct {
		name  string
		d     jobs.Draft
		field string
	}{
		{"no code", jobs.Draft{Schedule: "@daily"}, "code_name"},
		{"no schedule", jobs.Draft{CodeName: "work"}, "schedule"},
		{"bad schedule", jobs.Draft{CodeName: "work", Schedule: "* * *"}, "schedule"},
		{"too often", jobs.Draft{CodeName: "work", Schedule: "@every 1s"}, "schedule"},
		{"never fires", jobs.Draft{CodeName: "work", Schedule: "0 0 30 2 *"}, "schedule"},
		{"TZ prefix", jobs.Draft{CodeName: "work", Schedule: "CRON_TZ= 0 9 * * *"}, "schedule"},
		{"bad zone", jobs.Draft{CodeName: "work", Schedule: "@daily", Timezone: "Mars/Olympus"}, "timezone"},
		{"bad overlap", jobs.Draft{CodeName: "work", Schedule: "@daily", Overlap: "pile"}, "overlap"},
		{"bad catch-up", jobs.Draft{CodeName: "work", Schedule: "@daily", CatchUp: "all"}, "catch_up"},
		{"bad timeout", jobs.Draft{CodeName: "work", Schedule: "@daily", TimeoutMS: new(int64(0))}, "timeout_ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Create(t.Context(), "a", c.d)
			var fe *sandbox.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v; want a %s error", err, c.field)
			}
		})
	}
	if _, err := s.Create(t.Context(), "a", jobs.Draft{CodeName: "missing", Schedule: "@daily"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("job for missing code: %v", err)
	}
	var inErr *library.InputError
	if _, err := s.Create(t.Context(), "a", jobs.Draft{CodeName: "typed", Schedule: "@daily", Input: json.RawMessage(`{}`)}); !errors.As(err, &inErr) {
		t.Fatalf("job whose input breaks the schema: %v", err)
	}
}

func TestJobsOfDeletedCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		defer stop()
		ctx := context.Background()
		if _, err := e.lib.Create(ctx, "a", "doomed", library.Draft{Code: "pass"}); err != nil {
			t.Fatal(err)
		}
		job, err := s.Create(ctx, "a", jobs.Draft{CodeName: "doomed", Schedule: "@hourly"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.lib.Delete(ctx, "a", "doomed", true); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunNow(ctx, "a", job.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("run now of a job whose code is gone: %v", err)
		}
		if n := len(history(t, e.st, job.ID)); n != 0 {
			t.Fatalf("a fire was recorded for a run that cannot start: %d", n)
		}
		if p, err := s.SetEnabled(ctx, "a", job.ID, false); err != nil || p.Enabled {
			t.Fatalf("pausing a job whose code is gone: %+v %v", p, err)
		}
		if _, err := s.SetEnabled(ctx, "a", job.ID, true); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "set code_name") {
			t.Fatalf("resuming it says how to fix it: %v", err)
		}
	})
}

func TestCreateRefusesInputsNoRunAccepts(t *testing.T) {
	e := newEnv(t, t.TempDir())
	defer e.st.Close()
	s := jobs.New(e.st, e.lib, e.svc, jobs.Config{}, nil)
	deep := json.RawMessage(strings.Repeat("[", 600) + strings.Repeat("]", 600))
	_, err := s.Create(t.Context(), "a", jobs.Draft{CodeName: "work", Schedule: "@daily", Input: deep})
	var fe *sandbox.FieldError
	if !errors.As(err, &fe) || fe.Field != "input" {
		t.Fatalf("a job with an input nested 600 levels: %v", err)
	}
}

// A stopping daemon leaves a queued fire queued; the next daemon starts it.
func TestQueuedFireSurvivesAStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := newEnv(t, dir)
		s, stop := e.start(jobs.Config{})
		job, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "@every 10s", Overlap: "queue", Input: json.RawMessage(`{"sleep_s": 15}`)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(21 * time.Second) // 10: run (to 25); 20: queued
		synctest.Wait()
		stop() // waits for the run; the queued fire must not start
		fires := history(t, e.st, job.ID)
		if len(fires) != 2 || fires[1].Status != store.FireQueued {
			t.Fatalf("after the stop: %+v", fires)
		}
		e.st.Close()

		e = newEnv(t, dir)
		defer e.st.Close()
		_, stop = e.start(jobs.Config{})
		defer stop()
		synctest.Wait()
		fires = history(t, e.st, job.ID)
		if fires[1].Status != store.FireStarted || fires[1].ExecutionID == "" {
			t.Fatalf("the queued fire after the restart: %+v", fires[1])
		}
	})
}

// Issue 33, item 1: a later read of an "@every" job previews the fires on its own grid (from
// next_run_at), not on a grid counted from the moment of the read.
func TestGetPreviewsTheFiresOfTheSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, t.TempDir())
		defer e.st.Close()
		s, stop := e.start(jobs.Config{})
		defer stop()
		job, err := s.Create(context.Background(), "a", jobs.Draft{CodeName: "work", Schedule: "@every 10s", Input: json.RawMessage(`{"sleep_s": 1}`)})
		if err != nil {
			t.Fatal(err)
		}
		for _, wait := range []time.Duration{0, 6 * time.Second, 10 * time.Second} {
			time.Sleep(wait) // 6 s puts the read off the grid; 16 s is after a fire
			synctest.Wait()
			got, err := s.Get(context.Background(), "a", job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.NextRunAt == nil || len(got.NextFires) != jobs.Preview || !got.NextFires[0].Equal(*got.NextRunAt) {
				t.Fatalf("after %v: next_run_at %v, next fires %v", wait, got.NextRunAt, got.NextFires)
			}
			for i, f := range got.NextFires {
				if off := f.Sub(job.NextFires[0]); off%(10*time.Second) != 0 || off < 0 {
					t.Errorf("after %v: fire %d at %v is off the grid of %v", wait, i, f, job.NextFires[0])
				}
			}
		}
	})
}
