package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// PutSecret stores secret s with its sealed value (secrets.Cipher.Seal), replacing one of the
// same agent and name (whose CreatedAt it keeps), and returns the record as stored.
func (s *Store) PutSecret(ctx context.Context, sec secrets.Secret, sealed []byte) (secrets.Secret, error) {
	binding, err := json.Marshal(sec.Binding)
	if err != nil {
		return secrets.Secret{}, err
	}
	now := s.now()
	_, err = s.w.ExecContext(ctx, `INSERT INTO secrets (agent, name, value, binding, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (agent, name) DO UPDATE SET value = excluded.value, binding = excluded.binding, updated_at = excluded.updated_at`,
		sec.Agent, sec.Name, sealed, string(binding), ms(now), ms(now))
	if err != nil {
		return secrets.Secret{}, err
	}
	got, _, err := s.secret(ctx, sec.Agent, sec.Name)
	return got, err
}

// ListSecrets returns the secrets' records, never their values, by agent then name: those
// of agent ("" lists every agent's and the shared ones), with the shared ones when shared is
// true.
func (s *Store) ListSecrets(ctx context.Context, agent string, shared bool) ([]secrets.Secret, error) {
	withShared := 0
	if shared {
		withShared = 1
	}
	rows, err := s.r.QueryContext(ctx, `SELECT agent, name, binding, created_at, updated_at FROM secrets
		WHERE ? = '' OR agent = ? OR (? = 1 AND agent = '') ORDER BY agent, name`, agent, agent, withShared)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []secrets.Secret{}
	for rows.Next() {
		var (
			sec              secrets.Secret
			binding          string
			created, updated sql.NullInt64
		)
		if err := rows.Scan(&sec.Agent, &sec.Name, &binding, &created, &updated); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(binding), &sec.Binding); err != nil {
			return nil, fmt.Errorf("secret %q: its binding: %w", sec.Name, err)
		}
		sec.CreatedAt, sec.UpdatedAt = fromMS(created), fromMS(updated)
		out = append(out, sec)
	}
	return out, rows.Err()
}

// DeleteSecret removes the secret name of agent ("" the shared one). Errors: one wrapping
// ErrNotFound when there is none.
func (s *Store) DeleteSecret(ctx context.Context, agent, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM secrets WHERE agent = ? AND name = ?`, agent, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("secret %q%s: %w%s", name, scopeText(agent), ErrNotFound, s.otherScopes(ctx, agent, name))
	}
	return nil
}

// otherScopes says, for an error about secret name of agent's scope ("" shared), which other
// scopes hold a secret of that name (up to 5), so that the caller can name the right one; ""
// when none does.
func (s *Store) otherScopes(ctx context.Context, agent, name string) string {
	rows, err := s.r.QueryContext(ctx, `SELECT agent FROM secrets WHERE name = ? AND agent <> ? ORDER BY agent LIMIT 5`, name, agent)
	if err != nil {
		return ""
	}
	scopes, err := collect(rows, func(r scanner) (a string, err error) { return a, r.Scan(&a) })
	if err != nil {
		return ""
	}
	var parts, agents []string
	for _, a := range scopes {
		if a == "" {
			parts = append(parts, "a shared one (name no agent)")
		} else {
			agents = append(agents, strconv.Quote(a))
		}
	}
	if len(agents) > 0 {
		parts = append(parts, "one of agent "+strings.Join(agents, ", agent ")+" (name that agent)")
	}
	if len(parts) == 0 {
		return ""
	}
	return "; there is " + strings.Join(parts, " and ")
}

// SealedSecret returns the secret name that agent's runs may name (agent's own, else the
// shared one) with its sealed value. Errors: one wrapping ErrNotFound when there is none.
func (s *Store) SealedSecret(ctx context.Context, agent, name string) (secrets.Secret, []byte, error) {
	sec, sealed, err := s.secret(ctx, agent, name)
	if errors.Is(err, ErrNotFound) && agent != "" {
		sec, sealed, err = s.secret(ctx, "", name)
		if errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("secret %q of agent %q or shared: %w", name, agent, ErrNotFound)
		}
	}
	return sec, sealed, err
}

func (s *Store) secret(ctx context.Context, agent, name string) (secrets.Secret, []byte, error) {
	var (
		sec              = secrets.Secret{Agent: agent, Name: name}
		binding          string
		sealed           []byte
		created, updated sql.NullInt64
	)
	err := s.r.QueryRowContext(ctx, `SELECT value, binding, created_at, updated_at FROM secrets WHERE agent = ? AND name = ?`, agent, name).
		Scan(&sealed, &binding, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return secrets.Secret{}, nil, fmt.Errorf("secret %q%s: %w", name, scopeText(agent), ErrNotFound)
	}
	if err != nil {
		return secrets.Secret{}, nil, err
	}
	if err := json.Unmarshal([]byte(binding), &sec.Binding); err != nil {
		return secrets.Secret{}, nil, fmt.Errorf("secret %q: its binding: %w", name, err)
	}
	sec.CreatedAt, sec.UpdatedAt = fromMS(created), fromMS(updated)
	return sec, sealed, nil
}

func scopeText(agent string) string {
	if agent == "" {
		return " (shared)"
	}
	return " of agent " + fmt.Sprintf("%q", agent)
}
