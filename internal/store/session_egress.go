package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

var _ sandbox.SessionEgressRecorder = (*Store)(nil)

// RecordSessionEgress records one outbound connection of agent's session id's commands (or of
// what its calls left running) as it ended (sandbox.SessionEgressRecorder). The egress gate
// clips its texts, so a record is at most about 2 KiB; the ledger keeps them as long as the
// session's port requests (Prune: the executions' age and count).
func (s *Store) RecordSessionEgress(ctx context.Context, agent, id string, c sandbox.EgressConnection) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO session_egress (id, session_id, agent, started_at, record) VALUES (?, ?, ?, ?, ?)`,
		"eg_"+sandbox.NewSessionID()[3:], id, agent, ms(c.StartedAt), string(b))
	return err
}

// SessionEgress returns a page of the recorded outbound connections of agent's session id's
// commands, newest first (started_at, then record ID), and the cursor of the next page (""
// after the last). Another agent's session reads as having none. An invalid cursor is
// ErrInvalidCursor.
func (s *Store) SessionEgress(ctx context.Context, agent, id string, p Page) ([]sandbox.EgressConnection, string, error) {
	q := `SELECT id, started_at, record FROM session_egress WHERE session_id = ? AND agent = ?`
	args := []any{id, agent}
	if p.Cursor != "" {
		at, rid, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` AND (started_at < ? OR (started_at = ? AND id < ?))`
		args = append(args, at, at, rid)
	}
	limit := p.limit()
	q += ` ORDER BY started_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	list := []sandbox.EgressConnection{}
	var (
		last   int64
		lastID string
	)
	for rows.Next() {
		var (
			rid     string
			started sql.NullInt64
			rec     string
			c       sandbox.EgressConnection
		)
		if err := rows.Scan(&rid, &started, &rec); err != nil {
			return nil, "", err
		}
		if err := json.Unmarshal([]byte(rec), &c); err != nil {
			return nil, "", fmt.Errorf("session %q: a stored connection is not JSON: %w", id, err)
		}
		if len(list) == limit {
			list = append(list, c) // the next page's first: only its presence counts
			break
		}
		list, last, lastID = append(list, c), started.Int64, rid
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = encodeCursor(last, lastID)
	}
	return list, next, nil
}
