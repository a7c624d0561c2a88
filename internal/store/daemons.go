package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Several daemons on one database (PostgreSQL). Each has an ID (SetDaemon; config daemon_id,
// by default one kept in its data directory) recorded with the executions it runs and the job
// fires it claims, and a row in daemons with its address and a heartbeat. A daemon that starts
// again finalises its own records left running (FinishInterrupted, FailUnstartedFires); the
// others do it for a daemon whose heartbeat is older than the lease (RecoverExpired).

// DefaultLease is how long a daemon's claims last without a heartbeat.
const DefaultLease = 30 * time.Second

// SetDaemon sets the ID of the daemon using the store. Call it before any run.
func (s *Store) SetDaemon(id string) { s.daemon = id }

// Daemon returns the ID set by SetDaemon.
func (s *Store) Daemon() string { return s.daemon }

// Heartbeat records that this daemon is alive and answers at address (host:port).
func (s *Store) Heartbeat(ctx context.Context, address string) error {
	now := s.now().UnixMilli()
	_, err := s.w.ExecContext(ctx, `INSERT INTO daemons (id, address, started_at, heartbeat_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET address = excluded.address, heartbeat_at = excluded.heartbeat_at`,
		s.daemon, address, now, now)
	return err
}

// DaemonInfo is a daemon sharing the database.
type DaemonInfo struct {
	ID          string
	Address     string
	HeartbeatAt time.Time
}

// GetDaemon returns daemon id's address and last heartbeat; ErrNotFound (wrapped) when it never
// beat.
func (s *Store) GetDaemon(ctx context.Context, id string) (DaemonInfo, error) {
	d := DaemonInfo{ID: id}
	var beat int64
	err := s.r.QueryRowContext(ctx, `SELECT address, heartbeat_at FROM daemons WHERE id = ?`, id).Scan(&d.Address, &beat)
	if errors.Is(err, sql.ErrNoRows) {
		return d, fmt.Errorf("daemon %q: %w", id, ErrNotFound)
	}
	d.HeartbeatAt = time.UnixMilli(beat).UTC()
	return d, err
}

// RecoverExpired finalises the running records, fails the unstarted fires and ends the open
// sessions (daemon_stopped) of the daemons whose last heartbeat is older than lease (they
// died, or lost the database), other than this one, and returns how many records and fires it changed. A fire whose run had begun is
// answered by its record (sandbox_error, interrupted).
func (s *Store) RecoverExpired(ctx context.Context, lease time.Duration) (int, error) {
	cutoff := s.now().Add(-lease).UnixMilli()
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM daemons WHERE heartbeat_at < ? AND id <> ?`, cutoff, s.daemon)
	if err != nil {
		return 0, err
	}
	dead, err := collect(rows, func(r scanner) (string, error) { var id string; return id, r.Scan(&id) })
	if err != nil {
		return 0, err
	}
	total := 0
	for _, id := range dead {
		n, err := s.finishInterrupted(ctx, s.w, " AND daemon = ?", []any{id})
		if err != nil {
			return total, err
		}
		m, err := s.failUnstarted(ctx, " AND daemon = ?", id)
		if err != nil {
			return total, err
		}
		// Its sessions' interpreters died with it (or are removed when it restarts).
		k, err := s.endSessions(ctx, " AND daemon = ?", id)
		if err != nil {
			return total, err
		}
		if n+m+k > 0 {
			s.log.Warn("a daemon stopped answering: its runs were recorded as interrupted, its unstarted fires as failed and its sessions as ended",
				"daemon", id, "executions", n, "fires", m, "sessions", k)
		}
		total += n + m
	}
	return total, nil
}

// JobBusy returns the execution of job jobID that is going on (on any daemon): a started fire
// whose record is running, or whose run has not begun yet; "" when none is.
func (s *Store) JobBusy(ctx context.Context, jobID string) (string, error) {
	return jobBusy(ctx, s.r, jobID)
}

func jobBusy(ctx context.Context, db execer, jobID string) (string, error) {
	var exec sql.NullString
	err := db.QueryRowContext(ctx, `SELECT f.execution_id FROM job_fires f LEFT JOIN executions e ON e.id = f.execution_id
		WHERE f.job_id = ? AND f.status = 'started' AND (e.status = 'running' OR (e.id IS NULL AND f.began = 0))
		ORDER BY f.id LIMIT 1`, jobID).Scan(&exec)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return exec.String, err
}

// applyOverlap decides, in tx, what a fire f that would start does when another run of its
// job is going on, on this daemon or another: by the job's overlap policy it is queued (one
// at most) or skipped.
func applyOverlap(ctx context.Context, tx *Tx, f Fire) (Fire, error) {
	if f.Status != FireStarted {
		return f, nil
	}
	busy, err := jobBusy(ctx, tx, f.JobID)
	if err != nil || busy == "" {
		return f, err
	}
	var overlap string
	if err := tx.QueryRowContext(ctx, `SELECT overlap FROM jobs WHERE id = ?`, f.JobID).Scan(&overlap); err != nil {
		return f, err
	}
	var queued int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM job_fires WHERE job_id = ? AND status = 'queued'`, f.JobID).Scan(&queued); err != nil {
		return f, err
	}
	f.ExecutionID = ""
	switch {
	case overlap == "queue" && queued == 0:
		f.Status, f.Reason = FireQueued, fmt.Sprintf("waiting for execution %s to end (overlap \"queue\")", busy)
	case overlap == "queue":
		f.Status, f.Reason = FireSkipped, fmt.Sprintf("execution %s is running and a fire is already queued (overlap \"queue\" keeps one)", busy)
	default:
		f.Status, f.Reason = FireSkipped, fmt.Sprintf("execution %s was still running (overlap \"skip\")", busy)
	}
	return f, nil
}

// StartQueued starts queued fire id as execution executionID on this daemon when its job has
// no run going on, and says whether it did (another daemon may have started it first).
func (s *Store) StartQueued(ctx context.Context, id int64, jobID, executionID string) (bool, error) {
	started := false
	err := s.tx(ctx, func(tx *Tx) error {
		started = false
		if busy, err := jobBusy(ctx, tx, jobID); err != nil || busy != "" {
			return err
		}
		r, err := tx.ExecContext(ctx, `UPDATE job_fires SET status = 'started', execution_id = ?, reason = '', daemon = ?
			WHERE id = ? AND status = 'queued'`, executionID, nullString(s.daemon), id)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		started = n == 1
		return nil
	})
	return started, err
}

// FireDaemons returns the daemon that claimed each fire of job jobID ("" for none recorded),
// oldest fire first.
func (s *Store) FireDaemons(ctx context.Context, jobID string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT coalesce(daemon, '') FROM job_fires WHERE job_id = ? ORDER BY id`, jobID)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (string, error) { var d string; return d, r.Scan(&d) })
}

// ElsewhereError means what a request asks for is held by another daemon sharing the
// database (a running execution's stream, a live session): ask that daemon.
type ElsewhereError struct {
	What    string // what is held, as "execution exe_…"
	Daemon  string // the daemon's ID
	Address string // its API address (host:port), "" when unknown
}

func (e *ElsewhereError) Error() string {
	if e.Address == "" {
		return fmt.Sprintf("%s is held by daemon %s, which shares this database; ask that daemon", e.What, e.Daemon)
	}
	return fmt.Sprintf("%s is held by daemon %s at %s, which shares this database; send the request there", e.What, e.Daemon, e.Address)
}

// Elsewhere returns an *ElsewhereError for what, held by daemon id, with the daemon's address
// when it is known; nil when id is this daemon (or "").
func (s *Store) Elsewhere(ctx context.Context, what, id string) error {
	if id == "" || id == s.daemon {
		return nil
	}
	d, _ := s.GetDaemon(ctx, id)
	return &ElsewhereError{What: what, Daemon: id, Address: d.Address}
}
