package store

import (
	"context"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// Quotas bound what one agent may keep in the store through agent.store_result (and POSTs to
// /v1/agents/{agent}/results, which store the same way). The JSON field names are the
// configuration keys.
type Quotas struct {
	// ResultsMaxBytes is the most bytes one agent's results may take where they are stored:
	// every version of every key, each counted as its row and index entries hold it (see
	// resultBytes).
	ResultsMaxBytes int64 `json:"results_max_bytes"`
	// ResultsMaxVersions is the most versions one key of one agent may have.
	ResultsMaxVersions int `json:"results_max_versions"`
	// JobsPerAgent is the most jobs one agent may have; JobsMax the most in all.
	JobsPerAgent int `json:"jobs_per_agent"`
	JobsMax      int `json:"jobs_max"`
	// JobFilesMaxBytes is the most bytes the input files of all jobs may hold together (each
	// job's files are read for every fire).
	JobFilesMaxBytes int64 `json:"job_files_max_bytes"`
}

// DefaultQuotas are the quotas of a store until SetQuotas: 64 MiB and 100 versions per key of
// results; 50 jobs per agent, 500 in all, and 256 MiB of input files across all jobs.
func DefaultQuotas() Quotas {
	return Quotas{ResultsMaxBytes: 64 << 20, ResultsMaxVersions: 100, JobsPerAgent: 50, JobsMax: 500, JobFilesMaxBytes: 256 << 20}
}

// SetQuotas sets the quotas that later writes are checked against. Call it before the store
// is shared.
func (s *Store) SetQuotas(q Quotas) { s.quotas = q }

// Quotas returns the quotas in force.
func (s *Store) Quotas() Quotas { return s.quotas }

// QuotaError means a write would take an agent past one of its quotas; nothing was written.
// Its text names the quota's setting and how to free space.
type QuotaError struct {
	// Setting is the configuration key of the quota: results_max_bytes or results_max_versions.
	Setting string
	msg     string
}

func (e *QuotaError) Error() string { return e.msg }

// Is makes a QuotaError of class errclass.TooLarge.
func (e *QuotaError) Is(target error) bool { return target == errclass.TooLarge }

// checkResultQuota returns a *QuotaError when storing size more bytes under the agent's key
// would pass a quota. It runs in the write transaction, so concurrent writes cannot both pass.
func (s *Store) checkResultQuota(ctx context.Context, tx *Tx, agent, key string, size int64) error {
	var used int64
	var versions int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(bytes), 0) FROM results WHERE agent = ?`, agent).Scan(&used); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM results WHERE agent = ? AND key = ?`, agent, key).Scan(&versions); err != nil {
		return err
	}
	q := s.quotas
	switch {
	case versions >= q.ResultsMaxVersions:
		return &QuotaError{Setting: "results_max_versions", msg: fmt.Sprintf(
			"result %q of agent %q has %d versions, the most one key may have (results_max_versions); "+
				"delete the key to store it again (DELETE /v1/agents/%s/results/%s, or sandpit kb rm --kind results --agent %s KEY), or store under another key",
			key, agent, versions, agent, key, agent)}
	case used+size > q.ResultsMaxBytes:
		return &QuotaError{Setting: "results_max_bytes", msg: fmt.Sprintf(
			"storing %d bytes under %q would bring agent %q's results to %d bytes, over its quota of %d bytes (results_max_bytes; %d bytes are in use); "+
				"delete results it no longer needs (DELETE /v1/agents/%s/results/{key}, or sandpit kb rm --kind results --agent %s KEY), which frees their space",
			size, key, agent, used+size, q.ResultsMaxBytes, used, agent, agent)}
	}
	return nil
}

// useIncrementalVacuum makes the database give the pages of deleted rows back to the file
// system (see reclaim). A database made before it had no auto-vacuum: switching needs one
// VACUUM, which rewrites the file once (it needs free disk space of about its size).
func useIncrementalVacuum(ctx context.Context, db *dbx) (converted bool, err error) {
	const incremental = 2
	var mode int
	if err := db.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return false, err
	}
	if mode == incremental {
		return false, nil
	}
	if _, err := db.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err != nil {
		return false, err
	}
	if _, err := db.ExecContext(ctx, `VACUUM`); err != nil {
		return false, fmt.Errorf("switching to incremental vacuum (VACUUM needs free disk space of about the database's size): %w", err)
	}
	return true, nil
}

// reclaim gives the free pages of the database back to the file system after a delete, and
// truncates the write-ahead log. A reader holding an old snapshot can keep the log from being
// truncated; the next reclaim or checkpoint finishes the job. Failures are logged, not
// returned: the delete itself has been committed.
func (s *Store) reclaim(ctx context.Context) {
	if s.pg {
		return // PostgreSQL's autovacuum reclaims dead rows itself
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA incremental_vacuum`); err != nil {
		s.log.Warn("giving freed database pages back to the file system failed", "error", err)
		return
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		s.log.Warn("truncating the database's write-ahead log failed", "error", err)
	}
}

// checkJobQuota returns a *QuotaError when agent's job id (new when create) with files of
// filesBytes would pass jobs_per_agent, jobs_max or job_files_max_bytes. It runs in the write
// transaction, so concurrent writes cannot both pass.
func (s *Store) checkJobQuota(ctx context.Context, tx *Tx, agent, id string, create bool, filesBytes int64) error {
	q := s.quotas
	if create {
		var mine, all int
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(CASE WHEN agent = ? THEN 1 ELSE 0 END), 0), count(*) FROM jobs`, agent).Scan(&mine, &all); err != nil {
			return err
		}
		switch {
		case q.JobsPerAgent > 0 && mine >= q.JobsPerAgent:
			return &QuotaError{Setting: "jobs_per_agent", msg: fmt.Sprintf(
				"agent %q has %d jobs, the most one agent may have (jobs_per_agent); delete one first (DELETE /v1/agents/%s/jobs/{id}, or sandpit job rm)", agent, mine, agent)}
		case q.JobsMax > 0 && all >= q.JobsMax:
			return &QuotaError{Setting: "jobs_max", msg: fmt.Sprintf(
				"the daemon has %d jobs, the most it keeps (jobs_max); delete one first, or raise jobs_max", all)}
		}
	}
	if filesBytes == 0 || q.JobFilesMaxBytes <= 0 {
		return nil
	}
	var used, own int64 // the other jobs' files, and this job's as stored
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(CASE WHEN job_id <> ? THEN length(content) ELSE 0 END), 0),
		coalesce(sum(CASE WHEN job_id = ? THEN length(content) ELSE 0 END), 0) FROM job_files`, id, id).Scan(&used, &own); err != nil {
		return err
	}
	if filesBytes <= own {
		return nil // no bigger than before: a pause or an edit never fails on a quota lowered since
	}
	if used+filesBytes > q.JobFilesMaxBytes {
		return &QuotaError{Setting: "job_files_max_bytes", msg: fmt.Sprintf(
			"this job's files (%d bytes) and the other jobs' (%d bytes) would pass the %d bytes all jobs' input files may hold together (job_files_max_bytes); send smaller files, or delete jobs that have some",
			filesBytes, used, q.JobFilesMaxBytes)}
	}
	return nil
}
