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
const ReasonDaemonStopped = "the daemon stopped or restarted while the session was open; a session does not outlive its daemon"

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
	_, err = s.w.ExecContext(ctx, `UPDATE sessions SET ended_at = ?, end_reason = ?, reason = ?, info = ? WHERE id = ?`,
		ms(ended), info.EndReason, info.Reason, string(raw), info.ID)
	return err
}

// LookupSession returns the record of session id (sandbox.SessionLedger); one of this daemon
// that never ended reads as ended by the daemon's stop. An error wraps
// sandbox.ErrSessionNotFound when there is none; when another daemon sharing the database holds
// it open (a session is served by its own daemon only), the record comes with an error that
// wraps an *ElsewhereError naming that daemon and its address, of class not found.
func (s *Store) LookupSession(ctx context.Context, id string) (sandbox.SessionInfo, error) {
	var (
		raw                  string
		ended                sql.NullInt64
		code, reason, daemon sql.NullString
	)
	err := s.r.QueryRowContext(ctx, `SELECT info, ended_at, end_reason, reason, daemon FROM sessions WHERE id = ?`, id).Scan(&raw, &ended, &code, &reason, &daemon)
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
		held := s.Elsewhere(ctx, "session "+id, daemon.String)
		return info, errclass.Wrap(errclass.NotFound, held)
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
// daemon_stopped, and returns how many there were.
func (s *Store) endSessions(ctx context.Context, cond string, args ...any) (int, error) {
	args = append([]any{ms(s.now()), sandbox.EndDaemonStopped, ReasonDaemonStopped}, args...)
	r, err := s.w.ExecContext(ctx, `UPDATE sessions SET ended_at = ?, end_reason = ?, reason = ? WHERE ended_at IS NULL`+cond, args...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// sessionColumn is a result's session ID as stored: NULL for a one-shot run.
func sessionColumn(id string) sql.NullString {
	return sql.NullString{String: id, Valid: id != ""}
}
