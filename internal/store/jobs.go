package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Job is an agent's schedule for running saved code. The API answers it as apitype.Job.
type Job struct {
	// ID is "job_" and 26 base32 letters.
	ID    string
	Agent string
	// CodeName is the saved code the job runs; CodeVersion pins a version (0: the latest,
	// null in JSON).
	CodeName    string
	CodeVersion int
	// Schedule is the cron spec; Timezone the IANA zone it is read in.
	Schedule string
	Timezone string
	// Input is the JSON value each run gets as INPUT.
	Input json.RawMessage
	// TimeoutMS is each run's timeout in milliseconds; null means the daemon's default.
	TimeoutMS *int64
	Enabled   bool
	// Files lists the input files each fire's run gets: name and size (their bytes are in
	// Inputs).
	Files []JobFile
	// Inputs are the input files with their bytes; GetJob and DueJobs load them, ListJobs
	// does not. CreateJob and UpdateJob store them (replacing the job's files).
	Inputs []sandbox.InputFile
	// Charts is each run's chart setting (nil: the daemon's).
	Charts *bool
	// Secrets names the secrets each run may use (names only; nil: none).
	Secrets []string
	// Overlap is what a fire does while the previous run goes on: "skip" or "queue".
	Overlap string
	// CatchUp is what happens to fires missed while the daemon was down: "skip" or "once".
	CatchUp     string
	Description string
	// NextRunAt is the next scheduled fire; null while the job is disabled.
	NextRunAt *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// JobFile describes one of a job's input files. The API answers it as apitype.JobFile.
type JobFile struct {
	Name      string
	SizeBytes int64
}

// jobFilesOf describes files.
func jobFilesOf(files []sandbox.InputFile) []JobFile {
	if len(files) == 0 {
		return nil
	}
	out := make([]JobFile, len(files))
	for i, f := range files {
		out[i] = JobFile{Name: f.Name, SizeBytes: int64(len(f.Content))}
	}
	return out
}

// filesBytes is the bytes of files' contents together.
func filesBytes(files []sandbox.InputFile) int64 {
	var n int64
	for _, f := range files {
		n += int64(len(f.Content))
	}
	return n
}

// putJobFiles replaces the input files of job id with files, in tx.
func putJobFiles(ctx context.Context, tx *Tx, id string, files []sandbox.InputFile) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_files WHERE job_id = ?`, id); err != nil {
		return err
	}
	for i, f := range files {
		content := f.Content
		if content == nil {
			content = []byte{} // NOT NULL: an empty file is empty, not absent
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO job_files (job_id, position, name, content) VALUES (?, ?, ?, ?)`,
			id, i, f.Name, content); err != nil {
			return err
		}
	}
	return nil
}

// loadJobFiles sets j.Files, and j.Inputs when withContent.
func (s *Store) loadJobFiles(ctx context.Context, j *Job, withContent bool) error {
	q := `SELECT name, length(content), NULL FROM job_files WHERE job_id = ? ORDER BY position`
	if withContent {
		q = `SELECT name, length(content), content FROM job_files WHERE job_id = ? ORDER BY position`
	}
	rows, err := s.r.QueryContext(ctx, q, j.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	j.Files, j.Inputs = nil, nil
	for rows.Next() {
		var (
			f       JobFile
			content []byte
		)
		if err := rows.Scan(&f.Name, &f.SizeBytes, &content); err != nil {
			return err
		}
		j.Files = append(j.Files, f)
		if withContent {
			if content == nil {
				content = []byte{}
			}
			j.Inputs = append(j.Inputs, sandbox.InputFile{Name: f.Name, Content: content})
		}
	}
	return rows.Err()
}

// The kinds of a job's fire.
const (
	FireScheduled = "schedule" // the schedule came due
	FireCatchUp   = "catch_up" // a run for fires missed while the daemon was down
	FireManual    = "manual"   // "run now"
)

// The statuses of a job's fire.
const (
	FireStarted = "started" // an execution started (ExecutionID)
	FireSkipped = "skipped" // not run: the previous run was still going (overlap "skip")
	FireQueued  = "queued"  // waiting for the previous run to end (overlap "queue")
	FireMissed  = "missed"  // not run: the daemon was down at its time (Missed counts them)
	FireFailed  = "failed"  // could not start (Reason says why)
)

// Fire is one entry of a job's history: a time its schedule came due, and what happened.
type Fire struct {
	ID    int64
	JobID string
	Agent string
	Kind  string
	// Status is one of the Fire* statuses.
	Status string
	// ScheduledAt is the fire's time by the schedule (the first missed one for "missed");
	// FiredAt is when the scheduler handled it.
	ScheduledAt time.Time
	FiredAt     time.Time
	// Missed counts the fires a "missed" or "catch_up" entry stands for.
	Missed      int
	ExecutionID string
	Reason      string
	// Outcome is the execution's outcome once it has finished (from the ledger); Reason is then
	// the execution's reason when the fire has none of its own.
	Outcome string
	// Daemon is the ID of the daemon that handled the fire ("" for fires recorded before
	// daemons had IDs).
	Daemon string
}

const jobColumns = `id, agent, code_name, code_version, schedule, timezone, input, timeout_ms, enabled,
	overlap, catch_up, description, next_run_at, created_at, updated_at, charts, secrets`

// CreateJob stores j, whose ID the caller has chosen; the times are set by the store. It
// returns ErrNotFound (wrapped) when the agent has no code j.CodeName.
func (s *Store) CreateJob(ctx context.Context, j Job) (Job, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	j.CreatedAt, j.UpdatedAt = now, now
	err := s.tx(ctx, func(tx *Tx) error {
		if err := codeExists(ctx, tx, j.Agent, j.CodeName); err != nil {
			return err
		}
		if err := s.checkJobQuota(ctx, tx, j.Agent, j.ID, true, filesBytes(j.Inputs)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (`+jobColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			j.ID, j.Agent, j.CodeName, j.CodeVersion, j.Schedule, j.Timezone, string(j.Input), j.TimeoutMS,
			j.Enabled, j.Overlap, j.CatchUp, j.Description, msPtr(j.NextRunAt), now.UnixMilli(), now.UnixMilli(), j.Charts,
			strings.Join(j.Secrets, ","))
		if err != nil {
			return err
		}
		return putJobFiles(ctx, tx, j.ID, j.Inputs)
	})
	j.Files = jobFilesOf(j.Inputs)
	return j, err
}

// UpdateJob replaces the stored job j.ID (of j.Agent) with j, keeping its creation time.
func (s *Store) UpdateJob(ctx context.Context, j Job) (Job, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	j.UpdatedAt = now
	err := s.tx(ctx, func(tx *Tx) error {
		if err := codeExists(ctx, tx, j.Agent, j.CodeName); err != nil {
			return err
		}
		if err := s.checkJobQuota(ctx, tx, j.Agent, j.ID, false, filesBytes(j.Inputs)); err != nil {
			return err
		}
		var created int64
		err := tx.QueryRowContext(ctx, `UPDATE jobs SET code_name = ?, code_version = ?, schedule = ?, timezone = ?,
			input = ?, timeout_ms = ?, enabled = ?, overlap = ?, catch_up = ?, description = ?, next_run_at = ?,
			updated_at = ?, charts = ?, secrets = ? WHERE id = ? AND agent = ? RETURNING created_at`,
			j.CodeName, j.CodeVersion, j.Schedule, j.Timezone, string(j.Input), j.TimeoutMS, j.Enabled, j.Overlap,
			j.CatchUp, j.Description, msPtr(j.NextRunAt), now.UnixMilli(), j.Charts, strings.Join(j.Secrets, ","), j.ID, j.Agent).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %q: %w", j.ID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		j.CreatedAt = time.UnixMilli(created).UTC()
		return putJobFiles(ctx, tx, j.ID, j.Inputs)
	})
	j.Files = jobFilesOf(j.Inputs)
	return j, err
}

// PauseJob disables the agent's job id (no next fire). It works whether or not its code still
// exists.
func (s *Store) PauseJob(ctx context.Context, agent, id string) (Job, error) {
	r, err := s.w.ExecContext(ctx, `UPDATE jobs SET enabled = 0, next_run_at = NULL, updated_at = ? WHERE id = ? AND agent = ?`,
		s.now().UnixMilli(), id, agent)
	if err != nil {
		return Job{}, err
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return Job{}, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return s.GetJob(ctx, agent, id)
}

func codeExists(ctx context.Context, tx *Tx, agent, name string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM code WHERE agent = ? AND name = ?`, agent, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("code %q: %w; save it first", name, ErrNotFound)
	}
	return err
}

// GetJob returns the agent's job id, with its input files' bytes.
func (s *Store) GetJob(ctx context.Context, agent, id string) (Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ? AND agent = ?`, id, agent))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, err
	}
	return j, s.loadJobFiles(ctx, &j, true)
}

// ListJobs returns the agent's jobs by ID, a page at a time.
func (s *Store) ListJobs(ctx context.Context, agent string, p Page) ([]Job, string, error) {
	after := ""
	if p.Cursor != "" {
		var err error
		if after, err = decodeNameCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	limit := p.limit()
	jobs, err := s.queryJobs(ctx, false, `SELECT `+jobColumns+` FROM jobs WHERE agent = ? AND id > ? ORDER BY id LIMIT ?`,
		agent, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = encodeNameCursor(jobs[limit-1].ID)
	}
	return jobs, next, nil
}

// DueJobs returns the enabled jobs whose next fire is at or before now, with their input
// files' bytes.
func (s *Store) DueJobs(ctx context.Context, now time.Time) ([]Job, error) {
	return s.queryJobs(ctx, true, `SELECT `+jobColumns+` FROM jobs WHERE enabled = 1 AND next_run_at <= ? ORDER BY next_run_at, id`,
		now.UnixMilli())
}

// NextDue returns the earliest next fire of any enabled job, and false when there is none.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT min(next_run_at) FROM jobs WHERE enabled = 1`).Scan(&next)
	return fromMS(next), next.Valid, err
}

// queryJobs returns the jobs q selects, with their files (and their bytes when withContent).
func (s *Store) queryJobs(ctx context.Context, withContent bool, q string, args ...any) ([]Job, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	jobs := []Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		jobs = append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range jobs {
		if err := s.loadJobFiles(ctx, &jobs[i], withContent); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

// DeleteJob deletes the agent's job id and its history.
func (s *Store) DeleteJob(ctx context.Context, agent, id string) error {
	r, err := s.w.ExecContext(ctx, `DELETE FROM jobs WHERE id = ? AND agent = ?`, id, agent)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return nil
}

// ClaimFires moves job's next fire from expected to next and records fires, in one
// transaction. It returns false, recording nothing, when the job's next fire is no longer
// expected (it was changed, disabled or deleted meanwhile): a fire is claimed once. The
// recorded fires get their IDs.
func (s *Store) ClaimFires(ctx context.Context, jobID string, expected, next time.Time, fires []Fire) ([]Fire, bool, error) {
	claimed := false
	out := make([]Fire, len(fires))
	err := s.tx(ctx, func(tx *Tx) error {
		claimed = false
		if s.pg {
			// Another daemon claiming the job now holds its row: leave the fire to it.
			var at sql.NullInt64
			err := tx.QueryRowContext(ctx, `SELECT next_run_at FROM jobs WHERE id = ? AND enabled = 1 FOR UPDATE SKIP LOCKED`, jobID).Scan(&at)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			if !at.Valid || at.Int64 != expected.UnixMilli() {
				return nil
			}
		}
		r, err := tx.ExecContext(ctx, `UPDATE jobs SET next_run_at = ? WHERE id = ? AND enabled = 1 AND next_run_at = ?`,
			ms(next), jobID, expected.UnixMilli())
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return nil
		}
		claimed = true
		for i := range fires {
			if out[i], err = applyOverlap(ctx, tx, fires[i]); err != nil {
				return err
			}
			if out[i], err = s.insertFire(ctx, tx, out[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || !claimed {
		return nil, false, err
	}
	return out, true, nil
}

// AddFire records f (a manual fire, or a failure found after the claim) and returns it with its
// ID. A fire that would start while another run of its job goes on (on any daemon) is recorded
// as the job's overlap policy says (queued or skipped), as with ClaimFires.
func (s *Store) AddFire(ctx context.Context, f Fire) (Fire, error) {
	var out Fire
	err := s.tx(ctx, func(tx *Tx) error {
		var err error
		if out, err = applyOverlap(ctx, tx, f); err != nil {
			return err
		}
		out, err = s.insertFire(ctx, tx, out)
		return err
	})
	return out, err
}

// fireOverheadBytes is what a job fire's row takes besides its text columns: its integer
// columns, the row's header and its entries in the job_fires indexes.
const fireOverheadBytes = 160

// fireBytes is what fire f of daemon counts against ledger_max_bytes (job_fires.bytes; the
// migrations count old fires the same way). A fire that started a run counts in that run's
// record (recordBaseSQL); one that started none counts on its own.
func fireBytes(f Fire, daemon string) int64 {
	return int64(fireOverheadBytes + len(f.JobID) + len(f.Agent) + len(f.Kind) + len(f.Status) + len(f.Reason) +
		len(f.ExecutionID) + len(daemon))
}

func (s *Store) insertFire(ctx context.Context, tx *Tx, f Fire) (Fire, error) {
	size := fireBytes(f, s.daemon)
	err := tx.QueryRowContext(ctx, `INSERT INTO job_fires (job_id, agent, kind, status, scheduled_at, fired_at,
		missed, execution_id, reason, daemon, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		f.JobID, f.Agent, f.Kind, f.Status, f.ScheduledAt.UnixMilli(), f.FiredAt.UnixMilli(), f.Missed,
		nullString(f.ExecutionID), f.Reason, nullString(s.daemon), size).Scan(&f.ID)
	if err == nil && f.ExecutionID == "" {
		s.ledger.add(size) // counted again by the next Prune, should the transaction be retried
	}
	return f, err
}

// SetFire changes fire id's status, execution and reason (a queued fire that starts or fails,
// a started fire whose run could not start).
func (s *Store) SetFire(ctx context.Context, id int64, status, executionID, reason string) error {
	_, err := s.w.ExecContext(ctx, `UPDATE job_fires SET status = ?, execution_id = ?, reason = ?, bytes = bytes + ? WHERE id = ?`,
		status, nullString(executionID), reason, len(reason)+len(executionID), id)
	return err
}

// FireFilter selects fires of a job; zero fields select every fire. Since and Until bound the
// time the scheduler handled the fire: Since <= fired_at < Until.
type FireFilter struct {
	Since, Until time.Time
}

// ListFires returns the history of the agent's job id that f selects, newest first, a page at
// a time.
func (s *Store) ListFires(ctx context.Context, agent, jobID string, f FireFilter, p Page) ([]Fire, string, error) {
	if _, err := s.GetJob(ctx, agent, jobID); err != nil {
		return nil, "", err
	}
	q := `SELECT f.id, f.job_id, f.agent, f.kind, f.status, f.scheduled_at, f.fired_at, f.missed,
		f.execution_id, CASE WHEN f.reason = '' THEN coalesce(e.reason, '') ELSE f.reason END, e.outcome, coalesce(f.daemon, '')
		FROM job_fires f LEFT JOIN executions e ON e.id = f.execution_id
		WHERE f.job_id = ?`
	args := []any{jobID}
	if !f.Since.IsZero() {
		q += " AND f.fired_at >= ?"
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		q += " AND f.fired_at < ?"
		args = append(args, f.Until.UnixMilli())
	}
	if p.Cursor != "" {
		before, _, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += " AND f.id < ?"
		args = append(args, before)
	}
	limit := p.limit()
	q += " ORDER BY f.id DESC LIMIT ?"
	args = append(args, limit+1)
	fires, err := s.queryFires(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(fires) > limit {
		fires = fires[:limit]
		next = encodeCursor(fires[limit-1].ID, "")
	}
	return fires, next, nil
}

// QueuedFires returns every fire waiting for its job's previous run, oldest first.
func (s *Store) QueuedFires(ctx context.Context) ([]Fire, error) {
	return s.queryFires(ctx, `SELECT f.id, f.job_id, f.agent, f.kind, f.status, f.scheduled_at, f.fired_at,
		f.missed, f.execution_id, f.reason, NULL, coalesce(f.daemon, '') FROM job_fires f WHERE f.status = 'queued' ORDER BY f.id`)
}

// FailUnstartedFires marks failed the fires recorded as started whose execution never reached
// the ledger (the daemon stopped between claiming the fire and starting its run), and returns
// how many. A fire whose execution began stays as it is, even once the ledger has pruned it. The daemon calls it when it starts, before any fire.
//
// On PostgreSQL only this daemon's fires (SetDaemon) and those of no daemon are failed;
// RecoverExpired fails those of daemons that are gone.
func (s *Store) FailUnstartedFires(ctx context.Context) (int, error) {
	if !s.pg {
		return s.failUnstarted(ctx, "")
	}
	return s.failUnstarted(ctx, " AND (daemon IS NULL OR daemon = ?)", s.daemon)
}

// failUnstarted fails the unstarted fires cond (" AND …", with args) selects.
func (s *Store) failUnstarted(ctx context.Context, cond string, args ...any) (int, error) {
	r, err := s.w.ExecContext(ctx, `UPDATE job_fires SET status = 'failed', reason = ?
		WHERE status = 'started' AND began = 0`+cond,
		append([]any{"interrupted: the daemon stopped before the run started"}, args...)...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

func (s *Store) queryFires(ctx context.Context, q string, args ...any) ([]Fire, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	fires := []Fire{}
	for rows.Next() {
		var (
			f                Fire
			scheduled, fired int64
			execID, outcome  sql.NullString
		)
		if err := rows.Scan(&f.ID, &f.JobID, &f.Agent, &f.Kind, &f.Status, &scheduled, &fired, &f.Missed,
			&execID, &f.Reason, &outcome, &f.Daemon); err != nil {
			return nil, err
		}
		f.ScheduledAt, f.FiredAt = time.UnixMilli(scheduled).UTC(), time.UnixMilli(fired).UTC()
		f.ExecutionID, f.Outcome = execID.String, outcome.String
		fires = append(fires, f)
	}
	return fires, rows.Err()
}

func scanJob(row scanner) (Job, error) {
	var (
		j                Job
		input            string
		timeout, next    sql.NullInt64
		created, updated int64
		charts           sql.NullBool
		secrets          string
	)
	if err := row.Scan(&j.ID, &j.Agent, &j.CodeName, &j.CodeVersion, &j.Schedule, &j.Timezone, &input, &timeout,
		&j.Enabled, &j.Overlap, &j.CatchUp, &j.Description, &next, &created, &updated, &charts, &secrets); err != nil {
		return Job{}, err
	}
	if secrets != "" {
		j.Secrets = strings.Split(secrets, ",")
	}
	if charts.Valid {
		j.Charts = &charts.Bool
	}
	j.Input = json.RawMessage(input)
	if timeout.Valid {
		j.TimeoutMS = &timeout.Int64
	}
	if next.Valid {
		t := fromMS(next)
		j.NextRunAt = &t
	}
	j.CreatedAt, j.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return j, nil
}

func msPtr(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return ms(*t)
}
