package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The status of a ledger record.
const (
	StatusRunning  = "running"  // the run has started and not ended
	StatusFinished = "finished" // the run has its final result
)

// ReasonInterrupted is the reason of a run the daemon could not finish (it crashed or was
// stopped), set on the record when the daemon next starts.
const ReasonInterrupted = "interrupted: the daemon stopped before the run ended (crash, kill or restart); its result is lost"

// Execution is one record of the ledger: the run's result and the request that started it.
// While Status is "running", Outcome is empty and the result fields are zero.
type Execution struct {
	sandbox.Result
	// Status is "running" or "finished".
	Status string
	// CodeSHA256 is the hex SHA-256 of the code that ran; Code is that code (only in GetExecution).
	CodeSHA256 string
	Code       string
	// Input is the JSON value the code got as INPUT.
	Input json.RawMessage
	// EndedAt is when the run ended; null while it runs.
	EndedAt *time.Time
	// Daemon is the ID of the daemon that ran it ("" for records made before daemons had
	// IDs); a running execution's stream is only on that daemon.
	Daemon string
	// InputFiles are the input files the run was given, without their bytes (nil for none,
	// and for records made before they were kept).
	InputFiles []sandbox.InputFileInfo
}

// ExecutionSummary is an Execution without its code, input and outputs, as listed.
type ExecutionSummary struct {
	ID         string
	Agent      string
	Status     string
	Outcome    sandbox.Outcome
	Success    bool
	ExitCode   int
	Reason     string
	DurationMS int64
	TimeoutMS  int64
	StartedAt  time.Time
	EndedAt    *time.Time
	CodeSHA256 string
	// Start is how the program started ("fork" or "cold"), empty when unknown.
	Start sandbox.Start
	// StdoutPreview is the first PreviewChars characters of stdout; StderrPreview the last
	// PreviewChars of stderr, where a traceback ends. Whole in GetExecution.
	StdoutPreview string
	StderrPreview string
	sandbox.Origin
}

// PreviewChars is the length of the stdout and stderr previews of listed executions.
const PreviewChars = 200

// ExecutionFilter selects ledger records; zero fields select everything.
type ExecutionFilter struct {
	Agent, Source, CodeName, JobID string
	// Template selects the runs in sandboxes of a template, as their sessions name it: NAME
	// selects NAME:VERSION's and NAME:TAG's too, NAME:TAG only its own.
	Template string
	// SessionID selects a session's calls.
	SessionID string
	Outcome   sandbox.Outcome
	// Since and Until bound the start time: Since <= started_at < Until.
	Since, Until time.Time
}

// ErrInvalidCursor means a page cursor was not one this store gave out.
var ErrInvalidCursor = errclass.New(errclass.Invalid, "invalid cursor: pass the next_cursor of the previous page unchanged, or none for the first page")

// CodeSHA256 returns the hex SHA-256 of code, as recorded in the ledger.
func CodeSHA256(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// Begin records that a run is starting (sandbox.Recorder).
func (s *Store) Begin(ctx context.Context, spec sandbox.Spec, head sandbox.Result) error {
	sum := CodeSHA256(spec.Code)
	inputFiles, err := jsonColumn(sandbox.InputFileInfos(spec.Files))
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO code_blobs (sha256, code) VALUES (?, ?) ON CONFLICT DO NOTHING`, sum, spec.Code); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO executions
			(id, agent, source, job_id, code_name, code_version, template, template_version, code_sha256, input, timeout_ms, status, started_at, daemon, session_id, input_files)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)`,
			head.ID, head.Agent, head.Source, nullString(head.JobID), nullString(head.CodeName),
			nullInt(head.CodeVersion), nullString(head.Template), nullInt(head.TemplateVersion), sum, string(spec.Input), spec.TimeoutMS, ms(head.StartedAt), nullString(s.daemon), sessionColumn(head.SessionID), inputFiles)
		if err != nil || head.JobID == "" {
			return err
		}
		// The job's fire has begun: a crash from now on is the run's, recorded here.
		_, err = tx.ExecContext(ctx, `UPDATE job_fires SET began = 1 WHERE execution_id = ?`, head.ID)
		return err
	})
}

// Finish records a run's final result (sandbox.Recorder).
func (s *Store) Finish(ctx context.Context, res sandbox.Result) error {
	ended := s.now()
	if !res.StartedAt.IsZero() {
		ended = res.StartedAt.Add(time.Duration(res.DurationMS) * time.Millisecond)
	}
	deps, err := jsonColumn(res.Dependencies)
	if err != nil {
		return err
	}
	calls, err := jsonColumn(res.Calls)
	if err != nil {
		return err
	}
	files, err := jsonColumn(res.Files)
	if err != nil {
		return err
	}
	skipped, err := jsonColumn(res.FilesSkipped)
	if err != nil {
		return err
	}
	egress, err := jsonColumn(res.Egress)
	if err != nil {
		return err
	}
	uses, err := jsonColumn(res.SecretUses)
	if err != nil {
		return err
	}
	results, err := jsonColumn(res.Results)
	if err != nil {
		return err
	}
	var execErr sql.NullString
	if res.Error != nil {
		b, err := json.Marshal(res.Error)
		if err != nil {
			return err
		}
		execErr = sql.NullString{String: string(b), Valid: true}
	}
	cols := resultColumns{deps: deps, calls: calls, files: files, skipped: skipped, results: results, execErr: execErr}
	var size int64
	err = s.tx(ctx, func(tx *Tx) error {
		if err := finish(ctx, tx, res, ended, cols); err != nil {
			return err
		}
		if err := finishEgress(ctx, tx, res, egress, uses); err != nil {
			return err
		}
		// The record's size (ledger_max_bytes): its result, and what Begin wrote and its output
		// files, all kept by now, counted in the one statement.
		return tx.QueryRowContext(ctx, `INSERT INTO execution_bytes (execution_id, agent, bytes)
			SELECT e.id, e.agent, CAST(? AS BIGINT) + `+recordBaseSQL+` FROM executions e WHERE e.id = ?
			ON CONFLICT (execution_id) DO UPDATE SET bytes = excluded.bytes RETURNING bytes`,
			finishBytes(res, cols, len(egress.String)+len(uses.String)), res.ID).Scan(&size)
	})
	if err == nil {
		s.ledger.add(size)
	}
	return err
}

// resultColumns are a result's lists as stored: JSON text, NULL when empty.
type resultColumns struct {
	deps, calls, files, skipped, results, execErr sql.NullString
}

func finish(ctx context.Context, tx *Tx, res sandbox.Result, ended time.Time, cols resultColumns) error {
	r, err := tx.ExecContext(ctx, `UPDATE executions SET status = 'finished', outcome = ?, exit_code = ?,
		signal = ?, reason = ?, stdout = ?, stderr = ?, stdout_truncated = ?, stderr_truncated = ?,
		output = ?, duration_ms = ?, started_at = coalesce(?, started_at), ended_at = ?,
		dependencies = ?, install_ms = ?, calls = ?, start = ?, oom_kills = ?,
		files = ?, files_skipped = ?, files_truncated = ?, results = ?, exec_error = ?, execution_count = ? WHERE id = ?`,
		string(res.Outcome), res.ExitCode, res.Signal, res.Reason, res.Stdout, res.Stderr,
		res.StdoutTruncated, res.StderrTruncated, string(res.Output), res.DurationMS,
		ms(res.StartedAt), ms(ended), cols.deps, res.InstallMS, cols.calls, sql.NullString{String: string(res.Start), Valid: res.Start != ""},
		res.OOMKills, cols.files, cols.skipped, res.FilesTruncated, cols.results, cols.execErr, res.ExecutionCount, res.ID)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("execution %s: %w (Begin was not called)", res.ID, ErrNotFound)
	}
	for _, l := range res.Logs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO execution_logs (execution_id, agent, level, message, created_at) VALUES (?, ?, ?, ?, ?)`,
			res.ID, res.Agent, l.Level, l.Message, ms(l.CreatedAt)); err != nil {
			return err
		}
	}
	return nil
}

// Discard deletes the record of run id while it is still running (it never started after
// all), with any output files kept for it, and marks its job fire, if any, as not begun
// (sandbox.Recorder).
func (s *Store) Discard(ctx context.Context, id string) error {
	var (
		freed int64
		gone  []string
	)
	err := s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM executions WHERE id = ? AND status = 'running'`, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE job_fires SET began = 0 WHERE execution_id = ?`, id); err != nil {
			return err
		}
		var err error
		freed, gone, err = orphanedFiles(ctx, tx)
		return err
	})
	if err == nil && s.files != nil {
		s.files.forget(freed, gone)
	}
	return err
}

// FinishInterrupted finalises every record still running as sandbox_error with reason
// ReasonInterrupted, and returns how many there were. The daemon calls it when it starts,
// before any run: a record running then belongs to a daemon that is gone.
//
// On PostgreSQL, where daemons share the database, only this daemon's records (SetDaemon) and
// those of no daemon are finalised; RecoverExpired finalises those of daemons that are gone.
func (s *Store) FinishInterrupted(ctx context.Context) (int, error) {
	if !s.pg {
		return s.finishInterrupted(ctx, s.w, "", nil)
	}
	return s.finishInterrupted(ctx, s.w, " AND (daemon IS NULL OR daemon = ?)", []any{s.daemon})
}

// finishInterrupted finalises the running records that cond (" AND …", with args) selects.
func (s *Store) finishInterrupted(ctx context.Context, db execer, cond string, args []any) (int, error) {
	now := s.now().UnixMilli()
	// The run's end is unknown: its duration is counted to its timeout at most, not through
	// the downtime.
	duration := "min(max(0, ? - started_at), timeout_ms)"
	if s.pg {
		duration = "least(greatest(0, ? - started_at), timeout_ms)"
	}
	// Their sizes first (ledger_max_bytes): what Begin wrote and their kept files. Should the
	// update below fail, they are counted again, the same, when it is retried.
	if _, err := db.ExecContext(ctx, `INSERT INTO execution_bytes (execution_id, agent, bytes)
		SELECT e.id, e.agent, `+recordBaseSQL+` FROM executions e WHERE e.status = 'running'`+cond+`
		ON CONFLICT (execution_id) DO NOTHING`, args...); err != nil {
		return 0, err
	}
	r, err := db.ExecContext(ctx, `UPDATE executions SET status = 'finished', outcome = ?, exit_code = -1,
		signal = 0, reason = ?, stdout = '', stderr = '', stdout_truncated = 0, stderr_truncated = 0,
		output = 'null', duration_ms = `+duration+`, ended_at = ? WHERE status = 'running'`+cond,
		append([]any{string(sandbox.OutcomeSandboxError), ReasonInterrupted, now, now}, args...)...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	if err == nil && n > 0 {
		err = s.countLedgerBytes(ctx)
	}
	return int(n), err
}

// GetExecution returns the record of execution id, with its code.
func (s *Store) GetExecution(ctx context.Context, id string) (Execution, error) {
	row := s.r.QueryRowContext(ctx, `SELECT e.id, e.agent, e.source, e.job_id, e.code_name, e.code_version,
		e.template, e.template_version, e.code_sha256, b.code, e.input, e.timeout_ms, e.status, e.outcome, e.exit_code, e.signal, e.reason,
		e.stdout, e.stderr, e.stdout_truncated, e.stderr_truncated, e.output, e.duration_ms, e.started_at, e.ended_at,
		e.dependencies, e.install_ms, e.calls, e.start, e.oom_kills, e.files, e.files_skipped, e.files_truncated, e.daemon,
		coalesce(e.session_id, ''), e.input_files, e.results, e.exec_error, e.execution_count
		FROM executions e LEFT JOIN code_blobs b ON b.sha256 = e.code_sha256 WHERE e.id = ?`, id)
	var (
		e                       Execution
		jobID, codeName, code   sql.NullString
		tmpl                    sql.NullString
		tmplVersion             sql.NullInt64
		outcome, reason, output sql.NullString
		stdout, stderr          sql.NullString
		codeVersion, exit, sig  sql.NullInt64
		outTrunc, errTrunc, dur sql.NullInt64
		started, ended          sql.NullInt64
		input                   string
		deps, calls, start      sql.NullString
		files, skipped          sql.NullString
		inputFiles              sql.NullString
		installMS               sql.NullInt64
		daemon                  sql.NullString
		results, execErr        sql.NullString
	)
	err := row.Scan(&e.ID, &e.Agent, &e.Source, &jobID, &codeName, &codeVersion, &tmpl, &tmplVersion, &e.CodeSHA256, &code,
		&input, &e.TimeoutMS, &e.Status, &outcome, &exit, &sig, &reason, &stdout, &stderr, &outTrunc,
		&errTrunc, &output, &dur, &started, &ended, &deps, &installMS, &calls, &start, &e.OOMKills,
		&files, &skipped, &e.FilesTruncated, &daemon, &e.SessionID, &inputFiles, &results, &execErr, &e.ExecutionCount)
	e.Daemon = daemon.String
	if errors.Is(err, sql.ErrNoRows) {
		return Execution{}, fmt.Errorf("execution %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Execution{}, err
	}
	e.JobID, e.CodeName, e.CodeVersion, e.Code = jobID.String, codeName.String, int(codeVersion.Int64), code.String
	e.Template, e.TemplateVersion = tmpl.String, int(tmplVersion.Int64)
	e.Input = json.RawMessage(input)
	e.Outcome, e.Reason = sandbox.Outcome(outcome.String), reason.String
	e.Success = e.Outcome == sandbox.OutcomeOK
	e.ExitCode, e.Signal = int(exit.Int64), int(sig.Int64)
	e.Stdout, e.Stderr = stdout.String, stderr.String
	e.StdoutTruncated, e.StderrTruncated = outTrunc.Int64 != 0, errTrunc.Int64 != 0
	e.Output = json.RawMessage("null")
	if output.Valid && output.String != "" {
		e.Output = json.RawMessage(output.String)
	}
	e.DurationMS, e.StartedAt, e.InstallMS, e.Start = dur.Int64, fromMS(started), installMS.Int64, sandbox.Start(start.String)
	for _, c := range []struct {
		col sql.NullString
		dst any
	}{{deps, &e.Dependencies}, {calls, &e.Calls}, {files, &e.Files}, {skipped, &e.FilesSkipped}, {inputFiles, &e.InputFiles}, {results, &e.Results}, {execErr, &e.Error}} {
		if c.col.Valid {
			if err := json.Unmarshal([]byte(c.col.String), c.dst); err != nil {
				return Execution{}, fmt.Errorf("execution %q: a stored column is not JSON: %w", id, err)
			}
		}
	}
	if e.Logs, err = s.executionLogs(ctx, id); err != nil {
		return Execution{}, err
	}
	if err := s.executionEgress(ctx, id, &e); err != nil {
		return Execution{}, err
	}
	if len(e.Logs) == 0 {
		e.Logs = nil
	}
	if ended.Valid {
		t := fromMS(ended)
		e.EndedAt = &t
	}
	return e, nil
}

// ListExecutions returns the records f selects, newest first, a page at a time, with the
// cursor of the next page ("" after the last).
func (s *Store) ListExecutions(ctx context.Context, f ExecutionFilter, p Page) ([]ExecutionSummary, string, error) {
	where, args, err := executionsWhere(f, p.Cursor)
	if err != nil {
		return nil, "", err
	}
	tail := `substr(stderr, -` + strconv.Itoa(PreviewChars) + `)`
	if s.pg {
		tail = `right(stderr, ` + strconv.Itoa(PreviewChars) + `)`
	}
	q := `SELECT id, agent, source, job_id, code_name, code_version, template, template_version, code_sha256, timeout_ms, status,
		outcome, exit_code, reason, duration_ms, started_at, ended_at, start,
		coalesce(substr(stdout, 1, ` + strconv.Itoa(PreviewChars) + `), ''), coalesce(` + tail + `, '') FROM executions` + where
	limit := p.limit()
	q += " ORDER BY started_at DESC, id DESC LIMIT ?"
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	list, err := collect(rows, scanExecutionSummary)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		last := list[limit-1]
		next = encodeCursor(last.StartedAt.UnixMilli(), last.ID)
	}
	return list, next, nil
}

// executionsWhere returns the WHERE clause (with its leading space, "" for none) and its
// arguments that select f's records after cursor (a page's next_cursor, "" for the first).
func executionsWhere(f ExecutionFilter, cursor string) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if f.Agent != "" {
		add("agent = ?", f.Agent)
	}
	if f.Source != "" {
		add("source = ?", f.Source)
	}
	if f.CodeName != "" {
		add("code_name = ?", f.CodeName)
	}
	if f.JobID != "" {
		add("job_id = ?", f.JobID)
	}
	if f.Template != "" {
		if strings.Contains(f.Template, ":") {
			add("template = ?", f.Template)
		} else { // NAME selects its versions' and tags' runs too (NAME:3, NAME:stable)
			where = append(where, "(template = ? OR substr(template, 1, ?) = ?)")
			args = append(args, f.Template, len(f.Template)+1, f.Template+":")
		}
	}
	if f.SessionID != "" {
		add("session_id = ?", f.SessionID)
	}
	if f.Outcome != "" {
		add("outcome = ?", string(f.Outcome))
	}
	if !f.Since.IsZero() {
		add("started_at >= ?", f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		add("started_at < ?", f.Until.UnixMilli())
	}
	if cursor != "" {
		at, id, err := decodeCursor(cursor)
		if err != nil {
			return "", nil, err
		}
		where = append(where, "(started_at < ? OR (started_at = ? AND id < ?))")
		args = append(args, at, at, id)
	}
	if len(where) == 0 {
		return "", args, nil
	}
	return " WHERE " + strings.Join(where, " AND "), args, nil
}

// scanExecutionSummary reads a row of ListExecutions's query.
func scanExecutionSummary(r scanner) (ExecutionSummary, error) {
	var (
		e                      ExecutionSummary
		jobID, codeName, tmpl  sql.NullString
		outcome, reason, start sql.NullString
		codeVersion, exit, dur sql.NullInt64
		tmplVersion            sql.NullInt64
		started, ended         sql.NullInt64
	)
	if err := r.Scan(&e.ID, &e.Agent, &e.Source, &jobID, &codeName, &codeVersion, &tmpl, &tmplVersion, &e.CodeSHA256,
		&e.TimeoutMS, &e.Status, &outcome, &exit, &reason, &dur, &started, &ended, &start, &e.StdoutPreview, &e.StderrPreview); err != nil {
		return ExecutionSummary{}, err
	}
	e.JobID, e.CodeName, e.CodeVersion = jobID.String, codeName.String, int(codeVersion.Int64)
	e.Template, e.TemplateVersion = tmpl.String, int(tmplVersion.Int64)
	e.Outcome, e.Reason, e.ExitCode, e.DurationMS = sandbox.Outcome(outcome.String), reason.String, int(exit.Int64), dur.Int64
	e.Success = e.Outcome == sandbox.OutcomeOK
	e.StartedAt, e.Start = fromMS(started), sandbox.Start(start.String)
	if ended.Valid {
		t := fromMS(ended)
		e.EndedAt = &t
	}
	return e, nil
}

func encodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + ":" + id))
}

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrInvalidCursor
	}
	at, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return 0, "", ErrInvalidCursor
	}
	return n, id, nil
}

// Retention bounds the ledger: records older than MaxAge, and beyond the newest MaxCount, are
// pruned, and the oldest while all records take more than MaxBytes (with their kept output
// files; see ledger.go), down to LedgerLowWater percent of it; zero means no bound of that
// kind. Running records are never pruned, nor by bytes the newest finished one.
type Retention struct {
	MaxAge   time.Duration
	MaxCount int
	MaxBytes int64
}

// Prune deletes the finished records r does not keep, with their output files, and code no
// record refers to any more, gives the space they took back to the file system, and returns
// how many records it deleted. It recounts the ledger's bytes (LedgerBytes).
func (s *Store) Prune(ctx context.Context, r Retention) (int, error) {
	var (
		deleted int64
		freed   int64
		gone    []string
		total   int64
	)
	err := s.tx(ctx, func(tx *Tx) error {
		deleted, freed, gone, total = 0, 0, nil, 0 // PostgreSQL may run this again
		if r.MaxAge > 0 {
			cutoff := s.now().Add(-r.MaxAge).UnixMilli()
			// Job fires go with the ledger: those of the records deleted, and those without a
			// record (that started no run, or failed before it began), by their own age.
			if _, err := tx.ExecContext(ctx, `DELETE FROM job_fires WHERE status <> 'queued' AND (
				(fired_at < ? AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.id = job_fires.execution_id))
				OR execution_id IN (SELECT id FROM executions WHERE status = 'finished' AND started_at < ?))`, cutoff, cutoff); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM executions WHERE status = 'finished' AND started_at < ?`, cutoff)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			deleted += n
		}
		// A session's commands are kept as long as the executions are, by age and count (fairly
		// between agents), and count in the ledger's bytes (pruneBytes).
		if r.MaxAge > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_commands WHERE started_at < ?`, s.now().Add(-r.MaxAge).UnixMilli()); err != nil {
				return err
			}
		}
		if r.MaxCount > 0 {
			if err := s.pruneCommandsByCount(ctx, tx, r.MaxCount); err != nil {
				return err
			}
		}
		// The requests to sessions' ports are kept by age and count (each at most about 2 KiB);
		// expired shares go.
		if r.MaxAge > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM port_requests WHERE started_at < ?`, s.now().Add(-r.MaxAge).UnixMilli()); err != nil {
				return err
			}
		}
		if r.MaxCount > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM port_requests WHERE id IN (
				SELECT id FROM port_requests ORDER BY started_at DESC, id DESC `+s.noLimit()+` OFFSET ?)`, r.MaxCount); err != nil {
				return err
			}
		}
		// So are the connections of sessions' commands (each at most about 2 KiB).
		if r.MaxAge > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_egress WHERE started_at < ?`, s.now().Add(-r.MaxAge).UnixMilli()); err != nil {
				return err
			}
		}
		if r.MaxCount > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_egress WHERE id IN (
				SELECT id FROM session_egress ORDER BY started_at DESC, id DESC `+s.noLimit()+` OFFSET ?)`, r.MaxCount); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM port_shares WHERE expires_at <= ?`, s.now().UnixMilli()); err != nil {
			return err
		}
		if r.MaxCount > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM job_fires WHERE execution_id IN (
				SELECT id FROM executions WHERE status = 'finished' AND id IN (
				SELECT id FROM executions ORDER BY started_at DESC, id DESC `+s.noLimit()+` OFFSET ?))`, r.MaxCount); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM executions WHERE status = 'finished' AND id IN (
				SELECT id FROM executions ORDER BY started_at DESC, id DESC `+s.noLimit()+` OFFSET ?)`, r.MaxCount)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			deleted += n
		}
		n, t, err := s.pruneBytes(ctx, tx, r.MaxBytes)
		if err != nil {
			return err
		}
		deleted, total = deleted+n, t
		if deleted > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM execution_logs WHERE NOT EXISTS (
				SELECT 1 FROM executions e WHERE e.id = execution_logs.execution_id)`); err != nil {
				return err
			}
			var err error
			if freed, gone, err = orphanedFiles(ctx, tx); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `DELETE FROM code_blobs WHERE NOT EXISTS (
				SELECT 1 FROM executions e WHERE e.code_sha256 = code_blobs.sha256)`)
			return err
		}
		return nil
	})
	if err == nil && s.files != nil {
		s.files.forget(freed, gone)
	}
	// Commands and job fires pruned by bytes free pages too, with no record deleted.
	shrank := err == nil && total < s.ledger.used.Load()
	if err == nil {
		s.ledger.used.Store(total)
	}
	if err == nil && (deleted > 0 || shrank) {
		s.reclaim(ctx)
	}
	return int(deleted), err
}

// jsonColumn stores v as JSON text; an empty list is NULL.
func jsonColumn[T any](v []T) (sql.NullString, error) {
	if len(v) == 0 {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(v)
	return sql.NullString{String: string(b), Valid: err == nil}, err
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
func nullInt(n int) sql.NullInt64        { return sql.NullInt64{Int64: int64(n), Valid: n != 0} }
