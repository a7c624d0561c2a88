package httpapi

import (
	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/setup"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// This file maps the domain's types (sandbox, store, jobs, library, protocol, setup) into the
// wire types of package apitype, the only shapes the API writes. Where a domain type has the
// same fields as its wire type, a conversion does it, so that a field added on one side and
// not the other fails to compile here.

// each maps every element of in with f; nil stays nil.
func each[S, D any](in []S, f func(S) D) []D {
	if in == nil {
		return nil
	}
	out := make([]D, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// ResultOf returns res as the API answers it (no file's bytes inline).
func ResultOf(res sandbox.Result) apitype.Result {
	return apitype.Result{
		ID: res.ID, Agent: res.Agent, Outcome: apitype.Outcome(res.Outcome), Success: res.Success,
		ExitCode: res.ExitCode, Signal: res.Signal, Reason: res.Reason, OOMKills: res.OOMKills,
		Stdout: res.Stdout, Stderr: res.Stderr, StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		Output: res.Output, DurationMS: res.DurationMS, TimeoutMS: res.TimeoutMS, StartedAt: res.StartedAt,
		Start: apitype.Start(res.Start), Origin: originOf(res.Origin),
		Dependencies: each(res.Dependencies, dependencyOf), InstallMS: res.InstallMS,
		Calls:          each(res.Calls, func(c sandbox.CallRecord) apitype.CallRecord { return apitype.CallRecord(c) }),
		Logs:           each(res.Logs, func(l sandbox.LogLine) apitype.LogLine { return apitype.LogLine(l) }),
		Files:          each(res.Files, FileOf),
		FilesSkipped:   each(res.FilesSkipped, func(s sandbox.SkippedFile) apitype.SkippedFile { return apitype.SkippedFile(s) }),
		FilesTruncated: res.FilesTruncated,
		Egress:         each(res.Egress, func(c sandbox.EgressConnection) apitype.EgressConnection { return apitype.EgressConnection(c) }),
		SecretUses:     each(res.SecretUses, func(u sandbox.SecretUse) apitype.SecretUse { return apitype.SecretUse(u) }),
		EgressOmitted:  res.EgressOmitted, SecretUsesOmitted: res.SecretUsesOmitted,
		SessionID: res.SessionID, SessionEnded: res.SessionEnded,
		Results:        each(res.Results, func(d sandbox.Display) apitype.Display { return apitype.Display(d) }),
		Error:          (*apitype.ExecError)(res.Error),
		ExecutionCount: res.ExecutionCount,
	}
}

// FileOf returns f as the API lists it (without its bytes).
func FileOf(f sandbox.File) apitype.File {
	return apitype.File{Name: f.Name, SizeBytes: f.SizeBytes, MediaType: f.MediaType, SHA256: f.SHA256}
}

// EventOf returns ev as the API streams it (an output file's description, never its bytes).
func EventOf(ev sandbox.Event) apitype.Event {
	out := apitype.Event{Stream: apitype.Stream(ev.Stream), Data: ev.Data, Level: ev.Level}
	if ev.Dependency != nil {
		d := dependencyOf(*ev.Dependency)
		out.Dependency = &d
	}
	if ev.File != nil {
		f := FileOf(*ev.File)
		out.File = &f
	}
	if ev.Display != nil {
		d := apitype.Display(*ev.Display)
		out.Display = &d
	}
	return out
}

// eventLine returns ev as a line of an NDJSON answer.
func eventLine(ev sandbox.Event) apitype.StreamLine {
	e := EventOf(ev)
	return apitype.StreamLine{Type: e.Stream, Data: e.Data, File: e.File, Dependency: e.Dependency, Level: e.Level, Display: e.Display}
}

func dependencyOf(d sandbox.DependencyStatus) apitype.DependencyStatus {
	return apitype.DependencyStatus{Requirement: d.Requirement, Status: apitype.DependencyState(d.Status),
		Version: d.Version, DurationMS: d.DurationMS, Error: d.Error}
}

func originOf(o sandbox.Origin) apitype.Origin {
	return apitype.Origin{Source: apitype.Source(o.Source), JobID: o.JobID, CodeName: o.CodeName, CodeVersion: o.CodeVersion,
		Template: o.Template, TemplateVersion: o.TemplateVersion}
}

func violationsOf(vs []library.Violation) []apitype.Violation {
	return each(vs, func(v library.Violation) apitype.Violation { return apitype.Violation(v) })
}

func codeOf(c store.Code) apitype.Code { return apitype.Code(c) }

func codeSummaryOf(c store.Code) apitype.CodeSummary {
	return apitype.CodeSummary{Name: c.Name, Version: c.Version, Description: c.Description,
		Dependencies: c.Dependencies, Template: c.Template, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
}

func codeVersionOf(v store.CodeVersion) apitype.CodeVersion { return apitype.CodeVersion(v) }

// jobOf returns j as listed: code_version null for "the latest", files a list (empty when
// none).
func jobOf(j store.Job) apitype.Job {
	out := apitype.Job{ID: j.ID, Agent: j.Agent, CodeName: j.CodeName, Schedule: j.Schedule, Timezone: j.Timezone,
		Input: j.Input, TimeoutMS: j.TimeoutMS, Enabled: j.Enabled, Charts: j.Charts, Secrets: j.Secrets, Overlap: j.Overlap,
		CatchUp: j.CatchUp, Description: j.Description, NextRunAt: j.NextRunAt, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
		Files: each(j.Files, func(f store.JobFile) apitype.JobFile { return apitype.JobFile(f) })}
	if j.CodeVersion > 0 {
		v := j.CodeVersion
		out.CodeVersion = &v
	}
	if out.Files == nil {
		out.Files = []apitype.JobFile{}
	}
	return out
}

// scheduledOf returns s as answered when a job is created, read or changed: the job and its
// next fire times.
func scheduledOf(s jobs.Scheduled) apitype.ScheduledJob {
	return apitype.ScheduledJob{Job: jobOf(s.Job), NextFires: s.NextFires}
}

func fireOf(f store.Fire) apitype.Fire { return apitype.Fire(f) }

func executionOf(e store.Execution) apitype.Execution {
	return apitype.Execution{Result: ResultOf(e.Result), Status: e.Status, CodeSHA256: e.CodeSHA256,
		Code: e.Code, Input: e.Input, EndedAt: e.EndedAt, Daemon: e.Daemon, InputFiles: each(e.InputFiles, func(f sandbox.InputFileInfo) apitype.InputFileInfo {
			return apitype.InputFileInfo(f)
		})}
}

func executionSummaryOf(e store.ExecutionSummary) apitype.ExecutionSummary {
	return apitype.ExecutionSummary{ID: e.ID, Agent: e.Agent, Status: e.Status, Outcome: apitype.Outcome(e.Outcome),
		Success: e.Success, ExitCode: e.ExitCode, Reason: e.Reason, DurationMS: e.DurationMS, TimeoutMS: e.TimeoutMS,
		StartedAt: e.StartedAt, EndedAt: e.EndedAt, CodeSHA256: e.CodeSHA256, Start: apitype.Start(e.Start),
		StdoutPreview: e.StdoutPreview, StderrPreview: e.StderrPreview, Origin: originOf(e.Origin)}
}

func packageOf(p protocol.Package) apitype.Package { return apitype.Package(p) }

// SetupEventOf returns e as POST /v1/setup streams it.
func SetupEventOf(e setup.Event) apitype.SetupEvent { return apitype.SetupEvent(e) }

// SessionOf returns a session as the API answers it.
func SessionOf(s sandbox.SessionInfo) apitype.Session {
	out := apitype.Session{ID: s.ID, Agent: s.Agent, Template: s.Template, State: s.State, EndReason: s.EndReason, Reason: s.Reason,
		IdleTimeoutMS: s.IdleTimeoutMS, MaxLifetimeMS: s.MaxLifetimeMS, Limits: apitype.RunLimits(s.Limits),
		Dependencies: each(s.Dependencies, dependencyOf), CreatedAt: s.CreatedAt, LastUsedAt: s.LastUsedAt,
		ExpiresAt: s.ExpiresAt, EndedAt: s.EndedAt, Deadline: s.Deadline, NetworkAllow: s.NetworkAllow, Secrets: s.Secrets, Calls: s.Calls, Busy: s.Busy, Waiting: s.Waiting,
		AutoResume: s.AutoResume, AutoPause: s.AutoPause, PausedAt: s.PausedAt, RanMS: s.RanMS, Memory: s.Memory,
		ForkedFrom: s.ForkedFrom, LifecycleError: s.LifecycleError, History: each(s.History, sessionEventOf)}
	if h := s.Hibernation; h != nil && s.State == sandbox.SessionHibernated {
		out.Hibernation = &apitype.Hibernation{Daemon: h.Daemon, Bytes: h.Bytes, SHA256: h.SHA256, At: h.At}
	}
	return out
}

func sessionEventOf(e sandbox.SessionEvent) apitype.SessionEvent {
	return apitype.SessionEvent{At: e.At, Event: e.Event, Detail: e.Detail}
}
