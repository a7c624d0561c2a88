package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// The names of the session lifecycle's measurements (Latency.Name).
const (
	// LatencySessionPause and LatencySessionResume are POST …/pause and …/resume of a live
	// session through REST, end to end.
	LatencySessionPause  = "session_pause"
	LatencySessionResume = "session_resume"
	// LatencySessionHibernate is POST …/hibernate of a running session holding
	// lifecycleFileMiB of files; LatencySessionWake its resume and first answered call.
	LatencySessionHibernate = "session_hibernate"
	LatencySessionWake      = "session_wake"
)

// lifecycleFileMiB is how many MiB of files the hibernated session holds (written as four
// files: one file may not pass file_size_bytes); lifecycleRounds how many hibernations are
// timed.
const (
	lifecycleFileMiB = 100
	lifecycleRounds  = 3
)

// The lifecycle's goals (issue 31), in milliseconds.
const (
	MaxSessionPauseMS     = 50
	MaxSessionResumeMS    = 50
	MaxSessionHibernateMS = 2000
	MaxSessionWakeMS      = 1500
)

// lifecycleLatencies times a session's pause and resume (runs times each), and the
// hibernation of one holding lifecycleFileMiB of files with its resume to the first answered
// call (lifecycleRounds times). A daemon that refuses sessions or hibernation leaves them out,
// with a warning.
func (b *bench) lifecycleLatencies(ctx context.Context, in *instance, rep *Report) error {
	api := in.rest.api
	info, done := b.openSession(ctx, in, "the session lifecycle")
	if done == nil {
		return nil
	}
	defer done()
	timed := func(do func(context.Context) error) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		began := time.Now()
		err := do(cctx)
		return time.Since(began), err
	}
	step := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := api.SessionStep(ctx, "default", info.ID, name)
			return err
		}
	}
	call := func(code string) func(context.Context) error {
		return func(ctx context.Context) error {
			ms := int64(runTimeoutMS)
			a, err := api.RunInSession(ctx, "default", info.ID, apitype.SessionCall{Code: code, TimeoutMS: &ms}, nil)
			if err == nil && a.Outcome != apitype.OutcomeOK {
				err = fmt.Errorf("outcome %s: %s %s", a.Outcome, a.Reason, a.Stderr)
			}
			return err
		}
	}
	if _, err := timed(call(fmt.Sprintf("import os\nfor i in range(4):\n    open(f'data{i}.bin', 'wb').write(os.urandom(%d << 20))", lifecycleFileMiB/4))); err != nil {
		return fmt.Errorf("writing the session's files: %w", err)
	}
	var pauses, resumes, hibernates, wakes []time.Duration
	for range b.opts.Runs {
		d, err := timed(step("pause"))
		if err != nil {
			return fmt.Errorf("pausing the session: %w", err)
		}
		pauses = append(pauses, d)
		if d, err = timed(step("resume")); err != nil {
			return fmt.Errorf("resuming the session: %w", err)
		}
		resumes = append(resumes, d)
	}
	for range lifecycleRounds {
		d, err := timed(step("hibernate"))
		if err != nil {
			b.say("warning: hibernation not measured: %v", err)
			break
		}
		hibernates = append(hibernates, d)
		d, err = timed(func(ctx context.Context) error {
			if err := step("resume")(ctx); err != nil {
				return err
			}
			return call("print(1)")(ctx)
		})
		if err != nil {
			return fmt.Errorf("resuming the hibernated session: %w", err)
		}
		wakes = append(wakes, d)
	}
	ls := []Latency{
		newLatency(LatencySessionPause, "", "session pause (REST)", pauses, nil),
		newLatency(LatencySessionResume, "", "session resume from a pause (REST)", resumes, nil),
	}
	if len(hibernates) > 0 {
		ls = append(ls,
			newLatency(LatencySessionHibernate, "", fmt.Sprintf("session hibernate holding %d MiB of files (REST)", lifecycleFileMiB), hibernates, nil),
			newLatency(LatencySessionWake, "", fmt.Sprintf("session resume from hibernation (%d MiB) to the first answered call", lifecycleFileMiB), wakes, nil))
	}
	for _, l := range ls {
		b.say("%s: %d runs, p50 %.1f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}

// lifecycleTargets are the lifecycle's goals against the measurements p50 finds.
func lifecycleTargets(p50 func(string) float64) []Target {
	var out []Target
	for _, g := range []struct {
		name, latency, what string
		goal                float64
	}{
		{"session_pause_p50", LatencySessionPause, "session pause p50", MaxSessionPauseMS},
		{"session_resume_p50", LatencySessionResume, "session resume p50", MaxSessionResumeMS},
		{"session_hibernate_p50", LatencySessionHibernate, fmt.Sprintf("session hibernate (%d MiB) p50", lifecycleFileMiB), MaxSessionHibernateMS},
		{"session_wake_p50", LatencySessionWake, fmt.Sprintf("session resume from hibernation (%d MiB) to the first call p50", lifecycleFileMiB), MaxSessionWakeMS},
	} {
		if v := p50(g.latency); v > 0 {
			out = append(out, Target{Name: g.name, What: g.what, Unit: "ms", Op: "<=", Goal: g.goal, Value: round(v, 1), Status: evaluate(v, "<=", g.goal)})
		}
	}
	return out
}
