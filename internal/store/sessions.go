package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandpit-dev/sandpit/internal/errclass"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

var _ sandbox.SessionLedger = (*Store)(nil)

// ReasonDaemonStopped is the reason of a session a stopped daemon left open, set when the
// daemon next starts.
const ReasonDaemonStopped = "the daemon stopped or restarted while the session was open and not hibernated; its state was lost (only a hibernated session outlives its daemon)"

// BeginSession records a new session (sandbox.SessionLedger).
func (s *Store) BeginSession(ctx context.Context, info sandbox.SessionInfo) error {
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO sessions (id, agent, created_at, info, daemon) VALUES (?, ?, ?, ?, ?)`,
		info.ID, info.Agent, ms(info.CreatedAt), string(raw), nullString(s.daemon))
	return err
}

// EndSession records how a session ended (sandbox.SessionLedger).
func (s *Store) EndSession(ctx context.Context, info sandbox.SessionInfo) error {
	ended := s.now()
	if info.EndedAt != nil {
		ended = *info.EndedAt
	}
	info.ExpiresAt = nil
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `UPDATE sessions SET ended_at = ?, end_reason = ?, reason = ?, info = ?, hibernated_at = NULL WHERE id = ?`,
		ms(ended), info.EndReason, info.Reason, string(raw), info.ID)
	if err != nil {
		return err
	}
	// Its port shares end with it (a share is also refused once its session is not live).
	_, err = s.w.ExecContext(ctx, `DELETE FROM port_shares WHERE session_id = ?`, info.ID)
	return err
}

// LookupSession returns the record of session id (sandbox.SessionLedger); one of this daemon
// that never ended reads as ended by the daemon's stop, unless it is hibernated (then it reads
// as recorded, state hibernated). An error wraps
// sandbox.ErrSessionNotFound when there is none; when another daemon sharing the database holds
// it open (a session is served by its own daemon only), the record comes with an error that
// wraps an *ElsewhereError naming that daemon and its address, of class not found.
func (s *Store) LookupSession(ctx context.Context, id string) (sandbox.SessionInfo, error) {
	var (
		raw                  string
		ended, hibernated    sql.NullInt64
		code, reason, daemon sql.NullString
	)
	err := s.r.QueryRowContext(ctx, `SELECT info, ended_at, end_reason, reason, daemon, hibernated_at FROM sessions WHERE id = ?`, id).Scan(&raw, &ended, &code, &reason, &daemon, &hibernated)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.SessionInfo{}, fmt.Errorf("session %q: %w", id, sandbox.ErrSessionNotFound)
	}
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	var info sandbox.SessionInfo
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return sandbox.SessionInfo{}, fmt.Errorf("session %q: its stored record is not JSON: %w", id, err)
	}
	if !ended.Valid && daemon.String != s.daemon {
		what := "session " + id
		if hibernated.Valid {
			what = "hibernated session " + id + " (its files are in that daemon's data directory)"
		}
		return info, errclass.Wrap(errclass.NotFound, s.Elsewhere(ctx, what, daemon.String))
	}
	if !ended.Valid && hibernated.Valid {
		return info, nil // hibernated: open, and resumable by this daemon
	}
	info.State, info.ExpiresAt, info.Busy, info.Waiting = sandbox.SessionEnded, nil, false, 0
	info.EndReason, info.Reason = code.String, reason.String
	if !ended.Valid {
		info.EndReason, info.Reason = sandbox.EndDaemonStopped, ReasonDaemonStopped
	} else {
		t := fromMS(ended)
		info.EndedAt = &t
	}
	return info, nil
}

// EndOpenSessions ends every session this daemon left open (it stopped or crashed) with reason
// daemon_stopped, and returns how many there were. The daemon calls it when it starts; on
// PostgreSQL the sessions of other daemons sharing the database are left alone.
func (s *Store) EndOpenSessions(ctx context.Context) (int, error) {
	if s.pg {
		return s.endSessions(ctx, " AND (daemon IS NULL OR daemon = ?)", s.daemon)
	}
	return s.endSessions(ctx, "")
}

// endSessions ends the open sessions that cond (with args) selects with reason
// daemon_stopped, and returns how many there were. Hibernated sessions are left open: their
// files outlive the daemon, which resumes them when it runs again.
func (s *Store) endSessions(ctx context.Context, cond string, args ...any) (int, error) {
	args = append([]any{ms(s.now()), sandbox.EndDaemonStopped, ReasonDaemonStopped}, args...)
	r, err := s.w.ExecContext(ctx, `UPDATE sessions SET ended_at = ?, end_reason = ?, reason = ? WHERE ended_at IS NULL AND hibernated_at IS NULL`+cond, args...)
	if err != nil {
		return 0, err
	}
	// The port shares of the sessions ended go with them.
	if _, err := s.w.ExecContext(ctx, `DELETE FROM port_shares WHERE NOT EXISTS (
		SELECT 1 FROM sessions s WHERE s.id = port_shares.session_id AND s.ended_at IS NULL)`); err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// sessionColumn is a result's session ID as stored: NULL for a one-shot run.
func sessionColumn(id string) sql.NullString {
	return sql.NullString{String: id, Valid: id != ""}
}

// UpdateSession records an open session's state as it is now (sandbox.HibernationLedger):
// paused, active again, or hibernated (then hibernated_at is set, and the session outlives
// this daemon), or handed from the warm pool to its agent.
func (s *Store) UpdateSession(ctx context.Context, info sandbox.SessionInfo) error {
	info.ExpiresAt = nil
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	var hibernated sql.NullInt64
	if info.State == sandbox.SessionHibernated && info.Hibernation != nil {
		hibernated = ms(info.Hibernation.At)
	}
	r, err := s.w.ExecContext(ctx, `UPDATE sessions SET info = ?, agent = ?, hibernated_at = ?, daemon = ? WHERE id = ? AND ended_at IS NULL`,
		string(raw), info.Agent, hibernated, nullString(s.daemon), info.ID)
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("session %q has no open record: %w", info.ID, sandbox.ErrSessionNotFound)
	}
	return nil
}

// HibernatedSessions returns this daemon's hibernated sessions (sandbox.HibernationLedger),
// oldest first; on SQLite every hibernated session of the database.
func (s *Store) HibernatedSessions(ctx context.Context) ([]sandbox.SessionInfo, error) {
	q := `SELECT info FROM sessions WHERE ended_at IS NULL AND hibernated_at IS NOT NULL`
	var args []any
	if s.pg {
		q += ` AND (daemon IS NULL OR daemon = ?)`
		args = append(args, s.daemon)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY hibernated_at, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []sandbox.SessionInfo
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		var info sandbox.SessionInfo
		if err := json.Unmarshal([]byte(raw), &info); err != nil {
			return nil, fmt.Errorf("a hibernated session's stored record is not JSON: %w", err)
		}
		list = append(list, info)
	}
	return list, rows.Err()
}
