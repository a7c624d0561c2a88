package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// finishEgress records a finished run's outbound connections (network "allowlist"), col
// being their JSON column, in tx.
func finishEgress(ctx context.Context, tx *Tx, res sandbox.Result, col sql.NullString) error {
	if len(res.Egress) == 0 && res.EgressOmitted == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE executions SET egress = ?, egress_omitted = ? WHERE id = ?`, col, res.EgressOmitted, res.ID)
	return err
}

// executionEgress reads execution id's outbound connections into e.
func (s *Store) executionEgress(ctx context.Context, id string, e *Execution) error {
	var col sql.NullString
	if err := s.r.QueryRowContext(ctx, `SELECT egress, egress_omitted FROM executions WHERE id = ?`, id).Scan(&col, &e.EgressOmitted); err != nil {
		return err
	}
	if col.Valid {
		if err := json.Unmarshal([]byte(col.String), &e.Egress); err != nil {
			return fmt.Errorf("execution %q: a stored column is not JSON: %w", id, err)
		}
	}
	return nil
}
