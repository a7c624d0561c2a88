package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// RecordPortRequest records a request forwarded to a session's port (ports.Recorder). The
// proxy bounds its path and error at 1024 bytes each, so a record is small; the ledger keeps
// them as long as the session's commands (Prune: the executions' age and count).
func (s *Store) RecordPortRequest(ctx context.Context, rec sandbox.PortRequest) error {
	if rec.ID == "" {
		rec.ID = "rq_" + sandbox.NewSessionID()[3:]
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO port_requests (id, session_id, agent, port, method, path, status, client, websocket,
		bytes_in, bytes_out, started_at, duration_ms, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		rec.ID, rec.SessionID, rec.Agent, rec.Port, rec.Method, rec.Path, rec.Status, rec.Client, rec.WebSocket,
		rec.BytesIn, rec.BytesOut, ms(rec.StartedAt), rec.DurationMS, rec.Error)
	return err
}

// SessionPortRequests returns a page of the recorded requests to the ports of agent's session
// id, newest first (started_at, then ID), and the cursor of the next page ("" after the last).
// Another agent's session reads as having none. An invalid cursor is ErrInvalidCursor.
func (s *Store) SessionPortRequests(ctx context.Context, agent, id string, p Page) ([]sandbox.PortRequest, string, error) {
	q := `SELECT id, port, method, path, status, client, websocket, bytes_in, bytes_out, started_at, duration_ms, error
		FROM port_requests WHERE session_id = ? AND agent = ?`
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
	list := []sandbox.PortRequest{}
	var last int64
	for rows.Next() {
		r := sandbox.PortRequest{SessionID: id, Agent: agent}
		var (
			ws      int64
			started sql.NullInt64
		)
		if err := rows.Scan(&r.ID, &r.Port, &r.Method, &r.Path, &r.Status, &r.Client, &ws, &r.BytesIn, &r.BytesOut,
			&started, &r.DurationMS, &r.Error); err != nil {
			return nil, "", err
		}
		r.WebSocket, r.StartedAt = ws != 0, fromMS(started)
		if len(list) < limit {
			list, last = append(list, r), started.Int64
		} else {
			list = append(list, r) // the next page's first: only its presence counts
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = encodeCursor(last, list[limit-1].ID)
	}
	return list, next, nil
}

// MaxPortShares is the most shares one session holds at once (expired ones do not count).
const MaxPortShares = 64

// PortShare is a share link of a session's port: whoever holds its secret may open the port
// in a browser until it expires, it is revoked, or the session ends.
type PortShare struct {
	// ID is "sh_" and 26 lowercase base32 characters.
	ID        string
	Agent     string
	SessionID string
	Port      int
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ErrShareUnknown means no share has the secret given, or it has expired.
var ErrShareUnknown = errclass.New(errclass.NotFound, "no such share")

// CreatePortShare adds a share of port of agent's session id that expires at expires, and
// returns its secret (256 random bits, base64url: the store keeps only its SHA-256 digest).
// A session holds at most MaxPortShares unexpired shares: one more is a conflict.
func (s *Store) CreatePortShare(ctx context.Context, agent, id string, port int, expires time.Time) (string, PortShare, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	secret := base64.RawURLEncoding.EncodeToString(raw[:])
	sh := PortShare{ID: sandbox.NewShareID(), Agent: agent, SessionID: id, Port: port,
		CreatedAt: s.now().UTC(), ExpiresAt: expires.UTC()}
	err := s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM port_shares WHERE session_id = ? AND expires_at <= ?`, id, ms(sh.CreatedAt)); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM port_shares WHERE session_id = ?`, id).Scan(&n); err != nil {
			return err
		}
		if n >= MaxPortShares {
			return errclass.New(errclass.Conflict, fmt.Sprintf("session %s has %d shares, the most one session holds: "+
				"revoke some (DELETE …/shares/{share}), or wait for them to expire", id, n))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO port_shares (id, agent, session_id, port, digest, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, sh.ID, agent, id, port, keyDigest(secret), ms(sh.CreatedAt), ms(sh.ExpiresAt))
		return err
	})
	if err != nil {
		return "", PortShare{}, err
	}
	return secret, sh, nil
}

// PortShareOf returns the share whose secret is secret, or ErrShareUnknown when there is none
// (revoked, or its session ended) or it has expired.
func (s *Store) PortShareOf(ctx context.Context, secret string) (PortShare, error) {
	var (
		sh               PortShare
		created, expires sql.NullInt64
	)
	err := s.r.QueryRowContext(ctx, `SELECT id, agent, session_id, port, created_at, expires_at FROM port_shares
		WHERE digest = ? AND expires_at > ?`, keyDigest(secret), ms(s.now())).Scan(&sh.ID, &sh.Agent, &sh.SessionID, &sh.Port, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return PortShare{}, ErrShareUnknown
	}
	sh.CreatedAt, sh.ExpiresAt = fromMS(created), fromMS(expires)
	return sh, err
}

// PortShares returns the unexpired shares of agent's session id, newest first (at most
// MaxPortShares). Another agent's session reads as having none.
func (s *Store) PortShares(ctx context.Context, agent, id string) ([]PortShare, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, port, created_at, expires_at FROM port_shares
		WHERE session_id = ? AND agent = ? AND expires_at > ? ORDER BY created_at DESC, id DESC`, id, agent, ms(s.now()))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []PortShare{}
	for rows.Next() {
		sh := PortShare{Agent: agent, SessionID: id}
		var created, expires sql.NullInt64
		if err := rows.Scan(&sh.ID, &sh.Port, &created, &expires); err != nil {
			return nil, err
		}
		sh.CreatedAt, sh.ExpiresAt = fromMS(created), fromMS(expires)
		list = append(list, sh)
	}
	return list, rows.Err()
}

// RevokePortShare deletes share shareID of agent's session id: it stops working at once.
// Errors: one wrapping ErrNotFound when the session has no such share (or it expired).
func (s *Store) RevokePortShare(ctx context.Context, agent, id, shareID string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM port_shares WHERE id = ? AND session_id = ? AND agent = ? AND expires_at > ?`,
		shareID, id, agent, ms(s.now()))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("session %s has no share %q (revoked, or expired; GET …/shares lists them): %w", id, shareID, ErrNotFound)
	}
	return nil
}
