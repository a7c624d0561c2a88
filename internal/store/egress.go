package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// finishEgress records a finished run's outbound connections (network "allowlist") and its
// uses of its secrets' placeholders, egress and uses being their JSON columns, in tx.
func finishEgress(ctx context.Context, tx *Tx, res sandbox.Result, egress, uses sql.NullString) error {
	if len(res.Egress) == 0 && res.EgressOmitted == 0 && len(res.SecretUses) == 0 && res.SecretUsesOmitted == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE executions SET egress = ?, egress_omitted = ?, secret_uses = ?, secret_uses_omitted = ? WHERE id = ?`,
		egress, res.EgressOmitted, uses, res.SecretUsesOmitted, res.ID)
	return err
}

// executionEgress reads execution id's outbound connections and uses of secrets into e.
func (s *Store) executionEgress(ctx context.Context, id string, e *Execution) error {
	var egress, uses sql.NullString
	if err := s.r.QueryRowContext(ctx, `SELECT egress, egress_omitted, secret_uses, secret_uses_omitted FROM executions WHERE id = ?`, id).
		Scan(&egress, &e.EgressOmitted, &uses, &e.SecretUsesOmitted); err != nil {
		return err
	}
	for _, c := range []struct {
		col sql.NullString
		dst any
	}{{egress, &e.Egress}, {uses, &e.SecretUses}} {
		if c.col.Valid {
			if err := json.Unmarshal([]byte(c.col.String), c.dst); err != nil {
				return fmt.Errorf("execution %q: a stored column is not JSON: %w", id, err)
			}
		}
	}
	return nil
}
