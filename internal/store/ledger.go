package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The ledger's byte budget (Retention.MaxBytes, ledger_max_bytes). Each record's size is
// written to execution_bytes when it finishes (Finish, FinishInterrupted), in the statement
// that also counts what Begin wrote and its kept output files; a file evicted later by
// files_max_bytes is taken off. A running record has no size yet (there are at most slots and
// sessions of them, each within its caps). The store keeps a running total of the sizes,
// added to as Finish writes each and recounted by Prune; a write that takes it past the budget
// signals PruneDue, and Prune deletes the oldest finished records until the ledger is back
// under LedgerLowWater percent of the budget, so that it prunes once per tenth of the budget
// written rather than after every run. Prune's work is one sum over execution_bytes (a narrow
// table) and a walk of the oldest records it deletes, never a read of every record.

// recordOverheadBytes is what a record counts besides its columns' bytes: the row's other
// columns and its entries in the executions indexes. logLineOverheadBytes is the same for each
// log line.
const (
	recordOverheadBytes  = 512
	logLineOverheadBytes = 64
)

// LedgerLowWater is the share of Retention.MaxBytes, in percent, that Prune brings the ledger
// back under once it has passed the budget.
const LedgerLowWater = 90

// pruneBatch is how many of the oldest records Prune reads at a time while it frees bytes.
const pruneBatch = 256

// ledgerBytes counts the ledger's bytes against its budget. On PostgreSQL the total is this
// daemon's view: the database's at the last Prune (or open), plus what this daemon wrote since.
type ledgerBytes struct {
	max  atomic.Int64 // Retention.MaxBytes; 0: no byte budget
	used atomic.Int64 // the bytes execution_bytes lists, as far as this store knows
	// due receives (without blocking the writer) when a write takes used past max.
	due chan struct{}
}

func newLedgerBytes() ledgerBytes { return ledgerBytes{due: make(chan struct{}, 1)} }

// add counts delta more bytes and signals due when the total passes the budget.
func (l *ledgerBytes) add(delta int64) {
	used := l.used.Add(delta)
	if max := l.max.Load(); max > 0 && used > max {
		select {
		case l.due <- struct{}{}:
		default:
		}
	}
}

// SetRetention sets the retention the ledger is held to, shown by Retention; its MaxBytes is
// the budget past which a write signals PruneDue (Prune is told what to enforce by its own
// argument). Call it before the store is shared.
func (s *Store) SetRetention(r Retention) {
	s.retention = r
	s.ledger.max.Store(r.MaxBytes)
	s.ledger.add(0)
}

// Retention returns the retention of SetRetention (zero before it: no bound).
func (s *Store) Retention() Retention { return s.retention }

// LedgerBytes returns the bytes the ledger's records take (execution_bytes, as this store
// counts them: on PostgreSQL the database's total at the last Prune plus this daemon's writes
// since).
func (s *Store) LedgerBytes() int64 { return s.ledger.used.Load() }

// PruneDue receives when a write has taken the ledger past the MaxBytes of SetRetention:
// its owner should call Prune soon. A signal not yet received is not repeated.
func (s *Store) PruneDue() <-chan struct{} { return s.ledger.due }

// countLedgerBytes sets the running total from the database.
func (s *Store) countLedgerBytes(ctx context.Context) error {
	var used int64
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(bytes), 0) FROM execution_bytes`).Scan(&used); err != nil {
		return err
	}
	s.ledger.used.Store(used)
	return nil
}

// recordBaseSQL is, in SQL over the executions row e, what a record counts for what Begin
// wrote (recordOverheadBytes, its code and input) plus the charge of its kept output files (as
// files_max_bytes charges them). The migration that made execution_bytes counts old records
// the same way.
const recordBaseSQL = `512 + octet_length(e.input)
	+ coalesce((SELECT octet_length(b.code) FROM code_blobs b WHERE b.sha256 = e.code_sha256), 0)
	+ coalesce((SELECT sum(` + chargeSQL + `) FROM execution_files f WHERE f.execution_id = e.id), 0)`

// finishBytes is what a finished record counts besides recordBaseSQL: its result's
// text columns and log lines. egress is the length of its egress column.
func finishBytes(res sandbox.Result, cols resultColumns, egress int) int64 {
	n := len(res.Stdout) + len(res.Stderr) + len(res.Output) + len(res.Reason) +
		len(cols.deps.String) + len(cols.calls.String) + len(cols.files.String) + len(cols.skipped.String) + egress
	for _, l := range res.Logs {
		n += logLineOverheadBytes + len(l.Message)
	}
	return int64(n)
}

// pruneCursor is where pruneBytes's walk over the records, oldest first, stands.
type pruneCursor struct {
	at      int64  // the last record read: its started_at
	id      string // and its id
	started bool   // a record has been read
	done    bool   // the walk reached the newest finished record, or the end
}

// next reads the batch of up to pruneBatch records after c, oldest first, and returns the
// finished ones to delete, until their bytes reach excess, and those bytes. It stops at newest
// (which is kept) and moves c past what it read.
func (c *pruneCursor) next(ctx context.Context, tx *Tx, newest string, excess int64) ([]any, int64, error) {
	q, args := `SELECT e.id, e.started_at, e.status, b.bytes FROM executions e JOIN execution_bytes b ON b.execution_id = e.id`, []any{}
	if c.started {
		q, args = q+` WHERE (e.started_at, e.id) > (?, ?)`, []any{c.at, c.id}
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY e.started_at, e.id LIMIT ?`, append(args, pruneBatch)...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var (
		batch []any
		freed int64
		read  int
	)
	for rows.Next() {
		var (
			id, status string
			bytes      int64
		)
		if err := rows.Scan(&id, &c.at, &status, &bytes); err != nil {
			return nil, 0, err
		}
		read++
		c.id, c.started = id, true
		if id == newest {
			c.done = true
			break
		}
		if status != StatusFinished {
			continue
		}
		batch = append(batch, id)
		freed += bytes
		if freed >= excess {
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if read < pruneBatch {
		c.done = true
	}
	return batch, freed, nil
}

// pruneBytes deletes, in tx, the oldest finished records until the ledger's bytes are under
// LedgerLowWater percent of max, never the newest finished record (a record larger than the
// whole budget is kept until the next one finishes). It returns how many records it deleted
// and the bytes the ledger holds after.
func (s *Store) pruneBytes(ctx context.Context, tx *Tx, max int64) (int64, int64, error) {
	var total int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(bytes), 0) FROM execution_bytes`).Scan(&total); err != nil {
		return 0, 0, err
	}
	if max <= 0 || total <= max {
		return 0, total, nil
	}
	excess := total - max/100*LedgerLowWater
	var newest string
	// "<> 'running'" rather than "= 'finished'", which made SQLite sort the whole table.
	if err := tx.QueryRowContext(ctx, `SELECT id FROM executions WHERE status <> 'running'
		ORDER BY started_at DESC, id DESC LIMIT 1`).Scan(&newest); errors.Is(err, sql.ErrNoRows) {
		return 0, total, nil // only running records, which are never pruned
	} else if err != nil {
		return 0, 0, err
	}
	var (
		deleted int64
		c       pruneCursor
	)
	for excess > 0 && !c.done {
		batch, freed, err := c.next(ctx, tx, newest, excess)
		if err != nil {
			return 0, 0, err
		}
		excess -= freed
		if len(batch) == 0 {
			continue
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM executions WHERE status = 'finished' AND id IN (?`+
			strings.Repeat(", ?", len(batch)-1)+`)`, batch...)
		if err != nil {
			return 0, 0, err
		}
		n, _ := res.RowsAffected()
		deleted, total = deleted+n, total-freed
	}
	return deleted, total, nil
}
