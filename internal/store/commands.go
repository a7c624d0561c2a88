package store

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

var _ sandbox.CommandRecorder = (*Store)(nil)

// maxCommandText is how much of a command line the ledger keeps, in bytes.
const maxCommandText = 4096

// RecordCommand records a session's command that ended (sandbox.CommandRecorder): its command
// line (the first maxCommandText bytes), exit, signal, outcome, duration and bytes written.
func (s *Store) RecordCommand(ctx context.Context, agent string, p sandbox.ProcessInfo) error {
	if len(p.Command) > maxCommandText {
		p.Command = strings.ToValidUTF8(p.Command[:maxCommandText], "")
	}
	if len(p.Argv) > 0 {
		p.Argv = nil // the command line says it; the record stays small
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	var end sandbox.ProcessEnd
	if p.End != nil {
		end = *p.End
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO session_commands (id, session_id, agent, command, started_at, duration_ms, exit_code, signal,
		outcome, stdout_bytes, stderr_bytes, info) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.SessionID, agent, p.Command, ms(p.StartedAt), end.DurationMS, end.ExitCode, nullString(end.Signal),
		string(end.Outcome), p.StdoutBytes, p.StderrBytes, string(raw))
	return err
}

// SessionCommands returns the recorded commands of agent's session id, oldest first, at most
// limit (0: 1000).
func (s *Store) SessionCommands(ctx context.Context, agent, id string, limit int) ([]sandbox.ProcessInfo, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	rows, err := s.r.QueryContext(ctx, `SELECT info FROM session_commands WHERE session_id = ? AND agent = ?
		ORDER BY started_at, id LIMIT ?`, id, agent, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []sandbox.ProcessInfo{}
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		var p sandbox.ProcessInfo
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			continue
		}
		list = append(list, p)
	}
	return list, rows.Err()
}
