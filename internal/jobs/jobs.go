// Package jobs schedules agents' saved code: job definitions (a saved script, a cron spec read
// in an IANA timezone, an input, overlap and catch-up policies) and the Scheduler that fires
// them.
//
// The scheduler keeps its truth in the store: each job's next fire time, moved forward in the
// same transaction that records the fire, so a daemon that stops and starts again neither
// loses nor doubles a fire. Whether a job has a run going is the store's answer too (a started
// fire whose record is not finished), so overlap and catch-up policies hold across daemons
// sharing one store (PostgreSQL): each fire is claimed by one of them.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/schedule"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The overlap policies: what a fire does while the job's previous run is still going.
const (
	OverlapSkip  = "skip"  // record the fire as skipped (the default)
	OverlapQueue = "queue" // run it when the previous run ends; at most one waits
)

// The catch-up policies: what happens to fires missed while the daemon was down.
const (
	CatchUpSkip = "skip" // record them as missed (the default)
	CatchUpOnce = "once" // record them, and run once for all of them
)

// Draft is a job as a client writes it. Absent fields take their defaults.
type Draft struct {
	// CodeName is the agent's saved code to run (required); CodeVersion pins a version
	// (0 or absent: the latest at each fire).
	CodeName    string
	CodeVersion int
	// Schedule is a 5-field cron spec, @hourly, @daily, @weekly, @monthly, or
	// "@every <duration>" of at least 10s (see package schedule).
	Schedule string
	// Timezone is the IANA zone the schedule is read in; default "UTC".
	Timezone string
	// Input is the JSON value each run gets as INPUT; it must satisfy the code's input schema.
	Input json.RawMessage
	// TimeoutMS is each run's timeout in milliseconds; absent or null: the daemon's default.
	TimeoutMS *int64
	// Enabled says whether the job fires; default true.
	Enabled *bool
	// Files are written into each run's working directory before its code starts (see
	// sandbox.Request.Files); the job keeps them. Transports decode them from their own form.
	Files []sandbox.InputFile
	// Charts, when not nil, turns saving charts as output files on or off for each run.
	Charts *bool
	// Secrets names the secrets each run may use (sandbox.Request.Secrets), checked as the
	// job is saved and again at each fire.
	Secrets []string
	// Overlap is "skip" (default) or "queue"; CatchUp is "skip" (default) or "once".
	Overlap     string
	CatchUp     string
	Description string
}

// DraftOf returns the draft that describes j, for partial updates: decode a client's fields
// over it.
func DraftOf(j store.Job) Draft {
	enabled := j.Enabled
	return Draft{CodeName: j.CodeName, CodeVersion: j.CodeVersion, Schedule: j.Schedule, Timezone: j.Timezone,
		Input: j.Input, TimeoutMS: j.TimeoutMS, Enabled: &enabled, Overlap: j.Overlap, CatchUp: j.CatchUp,
		Description: j.Description, Files: j.Inputs, Charts: j.Charts, Secrets: j.Secrets}
}

// Store is the persistence jobs need; *store.Store satisfies it.
type Store interface {
	CreateJob(ctx context.Context, j store.Job) (store.Job, error)
	UpdateJob(ctx context.Context, j store.Job) (store.Job, error)
	PauseJob(ctx context.Context, agent, id string) (store.Job, error)
	GetJob(ctx context.Context, agent, id string) (store.Job, error)
	ListJobs(ctx context.Context, agent string, p store.Page) ([]store.Job, string, error)
	DeleteJob(ctx context.Context, agent, id string) error
	DueJobs(ctx context.Context, now time.Time) ([]store.Job, error)
	NextDue(ctx context.Context) (time.Time, bool, error)
	ClaimFires(ctx context.Context, jobID string, expected, next time.Time, fires []store.Fire) ([]store.Fire, bool, error)
	AddFire(ctx context.Context, f store.Fire) (store.Fire, error)
	SetFire(ctx context.Context, id int64, status, executionID, reason string) error
	ListFires(ctx context.Context, agent, jobID string, f store.FireFilter, p store.Page) ([]store.Fire, string, error)
	QueuedFires(ctx context.Context) ([]store.Fire, error)
	StartQueued(ctx context.Context, id int64, jobID, executionID string) (bool, error)
	FailUnstartedFires(ctx context.Context) (int, error)
}

// Library turns saved code into execution requests; *library.Library satisfies it.
type Library interface {
	Request(ctx context.Context, agent, name string, run library.Run, origin sandbox.Origin) (sandbox.Request, store.Code, error)
}

// Scheduled is a job with its next fire times, as answered when it is created or changed.
type Scheduled struct {
	store.Job
	// NextFires are the next five fire times (UTC), empty while the job is disabled. The first
	// is the job's NextRunAt (in the past while the fire is due and not yet handled); the rest
	// follow it on the schedule, so an "@every" job's preview keeps the phase it fires on.
	NextFires []time.Time
}

// MaxDescription is the longest description of a job or saved code, in bytes.
const MaxDescription = library.MaxDescription

// Preview is how many next fire times Scheduled holds.
const Preview = 5

// check validates d (with defaults applied) and returns it with its parsed schedule. Errors
// are *sandbox.FieldError, or the library's errors for the code and its input.
func check(ctx context.Context, lib Library, ex Executor, agent string, d Draft, maxTimeout time.Duration) (Draft, *schedule.Schedule, error) {
	if err := sandbox.CheckAgent(agent); err != nil {
		return d, nil, err
	}
	if d.CodeName == "" {
		return d, nil, &sandbox.FieldError{Field: "code_name", Message: "is required: name the saved code the job runs"}
	}
	if err := library.CheckName(d.CodeName); err != nil {
		return d, nil, &sandbox.FieldError{Field: "code_name", Message: err.(*sandbox.FieldError).Message}
	}
	if d.CodeVersion < 0 {
		return d, nil, &sandbox.FieldError{Field: "code_version", Message: fmt.Sprintf("is %d; versions start at 1 (0 or absent: the latest)", d.CodeVersion)}
	}
	if d.Schedule == "" {
		return d, nil, &sandbox.FieldError{Field: "schedule", Message: `is required: a cron spec such as "0 9 * * 1-5", "@daily" or "@every 10m"`}
	}
	if d.Timezone == "" {
		d.Timezone = "UTC"
	}
	sched, err := schedule.Parse(d.Schedule, d.Timezone)
	if err != nil {
		field := "schedule"
		if se, ok := err.(*schedule.Error); ok && se.TZ != "" {
			field = "timezone"
		}
		return d, nil, &sandbox.FieldError{Field: field, Message: err.Error()}
	}
	d.Schedule = sched.String()
	switch d.Overlap {
	case "":
		d.Overlap = OverlapSkip
	case OverlapSkip, OverlapQueue:
	default:
		return d, nil, &sandbox.FieldError{Field: "overlap", Message: fmt.Sprintf("%q is not an overlap policy: use \"skip\" (default) or \"queue\"", d.Overlap)}
	}
	switch d.CatchUp {
	case "":
		d.CatchUp = CatchUpSkip
	case CatchUpSkip, CatchUpOnce:
	default:
		return d, nil, &sandbox.FieldError{Field: "catch_up", Message: fmt.Sprintf("%q is not a catch-up policy: use \"skip\" (default) or \"once\"", d.CatchUp)}
	}
	if d.TimeoutMS != nil {
		if err := sandbox.CheckTimeout(*d.TimeoutMS, maxTimeout, "omit it for the daemon's default"); err != nil {
			return d, nil, err
		}
	}
	if d.Enabled == nil {
		enabled := true
		d.Enabled = &enabled
	}
	if len(strings.TrimSpace(string(d.Input))) == 0 {
		d.Input = json.RawMessage("null")
	}
	if !json.Valid(d.Input) {
		return d, nil, &sandbox.FieldError{Field: "input", Message: "is not valid JSON"}
	}
	if len(d.Description) > MaxDescription {
		return d, nil, &sandbox.FieldError{Field: "description", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(d.Description), MaxDescription)}
	}
	// The code must exist, and the input fit its schema and the limits now; a fire rechecks.
	req, _, err := lib.Request(ctx, agent, d.CodeName, runOf(d.Input, d.TimeoutMS, d.CodeVersion, d.Files, d.Charts, d.Secrets), sandbox.Origin{})
	if errors.Is(err, store.ErrNotFound) {
		return d, nil, fmt.Errorf("%w: set code_name (and code_version) to saved code that exists", err)
	}
	if err != nil {
		return d, nil, err
	}
	if err := ex.Validate(req); err != nil {
		return d, nil, err
	}
	if o, ok := ex.(secretsOpener); ok && len(d.Secrets) > 0 {
		if _, err := o.OpenSecrets(ctx, agent, d.Secrets); err != nil {
			return d, nil, err
		}
	}
	return d, sched, nil
}

// secretsOpener resolves the secrets a request names (*engine.Service): a job's names are
// checked as it is saved, not first at its fire.
type secretsOpener interface {
	OpenSecrets(ctx context.Context, agent string, names []string) (engine.SecretsRun, error)
}

// runOf is the library run of a job's fire (or of its check).
func runOf(input json.RawMessage, timeoutMS *int64, version int, files []sandbox.InputFile, charts *bool, secrets []string) library.Run {
	return library.Run{Input: input, TimeoutMS: timeoutMS, Version: version, Files: files, Charts: charts, Secrets: secrets}
}

// jobOf applies d to j, setting the next fire from now.
func jobOf(j store.Job, d Draft, sched *schedule.Schedule, now time.Time) store.Job {
	j.CodeName, j.CodeVersion, j.Schedule, j.Timezone = d.CodeName, d.CodeVersion, d.Schedule, d.Timezone
	j.Input, j.TimeoutMS, j.Enabled, j.Overlap, j.CatchUp, j.Description = d.Input, d.TimeoutMS, *d.Enabled, d.Overlap, d.CatchUp, d.Description
	j.Inputs, j.Charts, j.Secrets = d.Files, d.Charts, d.Secrets
	j.NextRunAt = nil
	if j.Enabled {
		next := sched.Next(now)
		j.NextRunAt = &next
	}
	return j
}

// scheduled is j with its next fire times: from its stored next fire when it has one (what
// the scheduler fires next), from now otherwise.
func scheduled(j store.Job, sched *schedule.Schedule, now time.Time) Scheduled {
	s := Scheduled{Job: j, NextFires: []time.Time{}}
	switch {
	case !j.Enabled || sched == nil:
	case j.NextRunAt != nil:
		s.NextFires = append(s.NextFires, j.NextRunAt.UTC())
		s.NextFires = append(s.NextFires, sched.NextN(*j.NextRunAt, Preview-1)...)
	default:
		s.NextFires = sched.NextN(now, Preview)
	}
	return s
}

// newJobID returns "job_" and 26 lowercase base32 letters (128 random bits).
func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "job_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}
