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

// commandOverheadBytes is what a command's record counts besides its text columns: the row's
// other columns and its entries in session_commands' indexes.
const commandOverheadBytes = 256

// commandBytes is what a command's record counts against ledger_max_bytes (session_commands.
// bytes; migration 23 counts old records the same way).
func commandBytes(id, session, agent, command, info string) int64 {
	return int64(commandOverheadBytes + len(id) + len(session) + len(agent) + len(command) + len(info))
}

// RecordCommand records a session's command that ended (sandbox.CommandRecorder): its command
// line (the first maxCommandText bytes; a longer one with CommandTruncated set), exit, signal,
// outcome, duration and bytes written. It counts in the ledger's bytes, in agent's share.
func (s *Store) RecordCommand(ctx context.Context, agent string, p sandbox.ProcessInfo) error {
	if len(p.Command) > maxCommandText {
		p.Command, p.CommandTruncated = strings.ToValidUTF8(p.Command[:maxCommandText], ""), true
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
	size := commandBytes(p.ID, p.SessionID, agent, p.Command, string(raw))
	if _, err = s.w.ExecContext(ctx, `INSERT INTO session_commands (id, session_id, agent, command, started_at, duration_ms, exit_code, signal,
		outcome, stdout_bytes, stderr_bytes, info, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.SessionID, agent, p.Command, ms(p.StartedAt), end.DurationMS, end.ExitCode, nullString(end.Signal),
		string(end.Outcome), p.StdoutBytes, p.StderrBytes, string(raw), size); err != nil {
		return err
	}
	s.ledger.add(size)
	return nil
}

// pruneCommandsByCount keeps at most max session commands, fairly between agents: only
// agents with more than their share (fairLevel over the counts) lose their oldest ones, so
// that one agent's flood of commands never pushes another's history out.
func (s *Store) pruneCommandsByCount(ctx context.Context, tx *Tx, max int) error {
	rows, err := tx.QueryContext(ctx, `SELECT agent, count(*) FROM session_commands GROUP BY agent`)
	if err != nil {
		return err
	}
	held := map[string]int64{}
	var total int64
	for rows.Next() {
		var (
			agent string
			n     int64
		)
		if err := rows.Scan(&agent, &n); err != nil {
			rows.Close()
			return err
		}
		held[agent], total = n, total+n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if total <= int64(max) {
		return nil
	}
	level := fairLevel(held, int64(max))
	for agent, n := range held {
		if n <= level {
			continue
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM session_commands WHERE id IN (
			SELECT id FROM session_commands WHERE agent = ? ORDER BY started_at DESC, id DESC `+s.noLimit()+` OFFSET ?)`, agent, level); err != nil {
			return err
		}
	}
	return nil
}

// SessionCommands returns a page of the recorded commands of agent's session id, newest
// first (started_at, then ID), and the cursor of the next page ("" after the last). Another
// agent's session reads as having none. An invalid cursor is ErrInvalidCursor.
func (s *Store) SessionCommands(ctx context.Context, agent, id string, p Page) ([]sandbox.ProcessInfo, string, error) {
	q := `SELECT info, started_at, id FROM session_commands WHERE session_id = ? AND agent = ?`
	args := []any{id, agent}
	if p.Cursor != "" {
		at, cid, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` AND (started_at < ? OR (started_at = ? AND id < ?))`
		args = append(args, at, at, cid)
	}
	limit := p.limit()
	q += ` ORDER BY started_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	type row struct {
		info sandbox.ProcessInfo
		at   int64
		id   string
	}
	var got []row
	for rows.Next() {
		var (
			raw string
			r   row
		)
		if err := rows.Scan(&raw, &r.at, &r.id); err != nil {
			return nil, "", err
		}
		if err := json.Unmarshal([]byte(raw), &r.info); err != nil {
			// A record this version cannot read still stands for its command.
			r.info = sandbox.ProcessInfo{ID: r.id, SessionID: id, State: "ended", Command: "(a record this daemon cannot read)"}
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(got) > limit {
		got = got[:limit]
		last := got[limit-1]
		next = encodeCursor(last.at, last.id)
	}
	list := make([]sandbox.ProcessInfo, len(got))
	for i, r := range got {
		list[i] = r.info
	}
	return list, next, nil
}
