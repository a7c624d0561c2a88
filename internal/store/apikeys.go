package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// APIKeyPrefix starts every API key: the E2B SDKs refuse a key that does not start so.
const APIKeyPrefix = "e2b_"

// ErrAPIKeyUnknown means an API key is not one the store issued, or it was revoked. It is of
// class errclass.Forbidden.
var ErrAPIKeyUnknown = errclass.New(errclass.Forbidden, "unknown or revoked API key")

// APIKey describes an issued key; the key itself is never stored, only its SHA-256 digest.
type APIKey struct {
	// ID names the key in listings and revocation ("key_" and 26 base32 characters).
	ID string `json:"id"`
	// Agent is the agent the key acts for.
	Agent string `json:"agent"`
	// Name is the free text given at creation (who holds it, what for).
	Name string `json:"name,omitempty"`
	// Prefix is the key's first 12 characters, enough to tell keys apart.
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// CreateAPIKey issues a new key for agent: "e2b_" and 40 hex digits (160 random bits). The
// key is returned once and stored only as its digest. Errors: a *sandbox.FieldError for an
// invalid agent name.
func (s *Store) CreateAPIKey(ctx context.Context, agent, name string) (string, APIKey, error) {
	if !sandbox.ValidAgent(agent) {
		return "", APIKey{}, &sandbox.FieldError{Field: "agent", Message: fmt.Sprintf(
			"%q is not a valid agent name: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit", agent)}
	}
	var raw [20]byte
	_, _ = rand.Read(raw[:])
	key := APIKeyPrefix + hex.EncodeToString(raw[:])
	info := APIKey{ID: "key_" + sandbox.NewSessionID()[3:], Agent: agent, Name: name, Prefix: key[:12], CreatedAt: s.now()}
	_, err := s.w.ExecContext(ctx, `INSERT INTO api_keys (id, agent, digest, prefix, name, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		info.ID, agent, keyDigest(key), info.Prefix, name, ms(info.CreatedAt))
	if err != nil {
		return "", APIKey{}, err
	}
	return key, info, nil
}

// APIKeyAgent returns the agent of key, or an error wrapping ErrAPIKeyUnknown when no key
// that is not revoked has its digest.
func (s *Store) APIKeyAgent(ctx context.Context, key string) (string, error) {
	var agent string
	err := s.r.QueryRowContext(ctx, `SELECT agent FROM api_keys WHERE digest = ? AND revoked_at IS NULL`, keyDigest(key)).Scan(&agent)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrAPIKeyUnknown
	}
	return agent, err
}

// ListAPIKeys returns the issued keys, revoked ones too, of agent (every agent's when it is
// empty), oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, agent string) ([]APIKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, agent, name, prefix, created_at, revoked_at FROM api_keys
		WHERE ? = '' OR agent = ? ORDER BY created_at, id`, agent, agent)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := []APIKey{}
	for rows.Next() {
		var (
			k                APIKey
			created, revoked sql.NullInt64
		)
		if err := rows.Scan(&k.ID, &k.Agent, &k.Name, &k.Prefix, &created, &revoked); err != nil {
			return nil, err
		}
		k.CreatedAt = fromMS(created)
		if revoked.Valid {
			t := fromMS(revoked)
			k.RevokedAt = &t
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// RevokeAPIKey revokes key id (its ID, or the key itself): it is refused from now on, and
// returned as revoked. Revoking a revoked key is no error. Errors: one wrapping ErrNotFound
// when there is no such key.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) (APIKey, error) {
	var (
		k                APIKey
		created, revoked sql.NullInt64
	)
	err := s.r.QueryRowContext(ctx, `SELECT id, agent, name, prefix, created_at, revoked_at FROM api_keys WHERE id = ? OR digest = ?`,
		id, keyDigest(id)).Scan(&k.ID, &k.Agent, &k.Name, &k.Prefix, &created, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return APIKey{}, fmt.Errorf("API key %q: %w; `sandpit keys list` shows the keys' IDs", id, ErrNotFound)
	}
	if err != nil {
		return APIKey{}, err
	}
	k.CreatedAt = fromMS(created)
	at := fromMS(revoked)
	if !revoked.Valid {
		at = s.now()
		if _, err := s.w.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ms(at), k.ID); err != nil {
			return APIKey{}, err
		}
	}
	k.RevokedAt = &at
	return k, nil
}

func keyDigest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}
