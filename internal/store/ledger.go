package store

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
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
// signals PruneDue, and Prune deletes records until the ledger is back under LedgerLowWater
// percent of the budget, so that it prunes once per tenth of the budget written rather than
// after every run; fairly between agents (see pruneBytes). Job fires count too: a fire that
// started a run in that run's record, one that started none in job_fires.bytes; so do a
// session's commands (session_commands.bytes). Prune's work is one sum by agent over
// execution_bytes (a narrow table), over the fires that started no run and over the commands,
// and a walk of the oldest records it deletes, never a read of every record.

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
	held, err := agentsBytes(ctx, s.r)
	if err != nil {
		return err
	}
	var used int64
	for _, n := range held {
		used += n
	}
	s.ledger.used.Store(used)
	return nil
}

// recordBaseSQL is, in SQL over the executions row e, what a record counts for what Begin
// wrote (recordOverheadBytes, its code, input and input files' list) plus the charge of its
// kept output files (as files_max_bytes charges them) and the job fire that started it. The
// migration that made execution_bytes counts old records
// the same way.
const recordBaseSQL = `512 + octet_length(e.input) + coalesce(octet_length(e.input_files), 0)
	+ coalesce((SELECT octet_length(b.code) FROM code_blobs b WHERE b.sha256 = e.code_sha256), 0)
	+ coalesce((SELECT sum(` + chargeSQL + `) FROM execution_files f WHERE f.execution_id = e.id), 0)
	+ coalesce((SELECT sum(jf.bytes) FROM job_fires jf WHERE jf.execution_id = e.id), 0)`

// finishBytes is what a finished record counts besides recordBaseSQL: its result's
// text columns (its notebook results and error included) and log lines. egress is the length of its egress column.
func finishBytes(res sandbox.Result, cols resultColumns, egress int) int64 {
	n := len(res.Stdout) + len(res.Stderr) + len(res.Output) + len(res.Reason) +
		len(cols.deps.String) + len(cols.calls.String) + len(cols.files.String) + len(cols.skipped.String) + egress +
		len(cols.results.String) + len(cols.execErr.String)
	for _, l := range res.Logs {
		n += logLineOverheadBytes + len(l.Message)
	}
	return int64(n)
}

// querier is a *dbx or a *Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// agentsBytes returns the ledger's bytes by agent: its finished records (execution_bytes), its
// job fires that started no run and its sessions' commands.
func agentsBytes(ctx context.Context, db querier) (map[string]int64, error) {
	held := map[string]int64{}
	for _, q := range []string{
		`SELECT agent, sum(bytes) FROM execution_bytes GROUP BY agent`,
		`SELECT agent, sum(bytes) FROM job_fires WHERE execution_id IS NULL GROUP BY agent`,
		`SELECT agent, sum(bytes) FROM session_commands GROUP BY agent`,
	} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				agent string
				n     int64
			)
			if err := rows.Scan(&agent, &n); err != nil {
				rows.Close()
				return nil, err
			}
			held[agent] += n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// fairLevel returns the most bytes each agent may keep so that the agents' bytes, each cut to
// it, add up to target: agents under it keep all theirs, and share what they leave equally
// among the others (max-min fairness). It is the largest agent's bytes when all fit.
func fairLevel(held map[string]int64, target int64) int64 {
	sizes := slices.Sorted(maps.Values(held))
	left := target
	for i, n := range sizes {
		share := left / int64(len(sizes)-i)
		if n > share {
			return share
		}
		left -= n
	}
	if len(sizes) == 0 {
		return 0
	}
	return sizes[len(sizes)-1]
}

// pruneCursor is where pruneAgent's walk over an agent's records and commands, oldest first,
// stands.
type pruneCursor struct {
	agent   string // whose records it walks
	at      int64  // the last record read: its started_at
	id      string // and its id
	started bool   // a record has been read
	done    bool   // the walk reached the end
}

// pruned is what a batch of pruneCursor.next deletes: records and commands, by ID.
type pruned struct {
	records, commands []any
}

// next reads the batch of up to pruneBatch records and commands of c.agent after c, oldest
// first, and returns the finished records but newest (which is kept), and the commands, to
// delete, until their bytes reach excess, and those bytes. It moves c past what it read.
func (c *pruneCursor) next(ctx context.Context, tx *Tx, newest string, excess int64) (pruned, int64, error) {
	after, args := "", []any{c.agent}
	if c.started {
		after, args = ` AND (started_at, id) > (?, ?)`, append(args, c.at, c.id)
	}
	// Each kind's oldest pruneBatch, then the oldest pruneBatch of both: each arm walks its
	// index and the sort is of 2*pruneBatch rows at most.
	q := `SELECT kind, id, started_at, status, bytes FROM (
			SELECT 'e' AS kind, e.id AS id, e.started_at AS started_at, e.status AS status, b.bytes AS bytes
			FROM executions e JOIN execution_bytes b ON b.execution_id = e.id
			WHERE e.agent = ?` + strings.ReplaceAll(after, "(started_at, id)", "(e.started_at, e.id)") + ` ORDER BY e.started_at, e.id LIMIT ?) x
		UNION ALL
		SELECT kind, id, started_at, status, bytes FROM (
			SELECT 'c' AS kind, id, started_at, 'finished' AS status, bytes FROM session_commands
			WHERE agent = ?` + after + ` ORDER BY started_at, id LIMIT ?) y
		ORDER BY started_at, id LIMIT ?`
	arm := append(args, pruneBatch)
	args = append(append(slices.Clone(arm), arm...), pruneBatch)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return pruned{}, 0, err
	}
	defer rows.Close()
	var (
		batch pruned
		freed int64
		read  int
	)
	for rows.Next() {
		var (
			kind, id, status string
			bytes            int64
		)
		if err := rows.Scan(&kind, &id, &c.at, &status, &bytes); err != nil {
			return pruned{}, 0, err
		}
		read++
		c.id, c.started = id, true
		switch {
		case kind == "c":
			batch.commands = append(batch.commands, id)
		case id == newest || status != StatusFinished:
			continue
		default:
			batch.records = append(batch.records, id)
		}
		freed += bytes
		if freed >= excess {
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return pruned{}, 0, err
	}
	if read < pruneBatch {
		c.done = true
	}
	return batch, freed, nil
}

// pruneBytes deletes, in tx, finished records and job fires until the ledger's bytes are under
// LedgerLowWater percent of max, fairly between agents: only agents over their share (see
// fairLevel) lose anything, each its own job fires that started no run first, then its own
// oldest finished records and commands, never its newest finished record (a record larger
// than the whole budget is kept until the agent's next one finishes). So one agent's runs never push another
// agent's records out while that agent keeps within its share. It returns how many records it
// deleted and the bytes the ledger holds after.
func (s *Store) pruneBytes(ctx context.Context, tx *Tx, max int64) (int64, int64, error) {
	held, err := agentsBytes(ctx, tx)
	if err != nil {
		return 0, 0, err
	}
	var total int64
	for _, n := range held {
		total += n
	}
	if max <= 0 || total <= max {
		return 0, total, nil
	}
	level := fairLevel(held, max/100*LedgerLowWater)
	var deleted int64
	for _, agent := range slices.Sorted(maps.Keys(held)) {
		if held[agent] <= level {
			continue
		}
		n, freed, err := s.pruneAgent(ctx, tx, agent, held[agent]-level)
		if err != nil {
			return 0, 0, err
		}
		deleted, total = deleted+n, total-freed
	}
	return deleted, total, nil
}

// pruneAgent deletes, in tx, agent's job fires that started no run, oldest first, then its
// oldest finished records but its newest and its oldest commands, by age, until excess bytes
// are freed or nothing is left. It returns the records deleted and the bytes freed.
func (s *Store) pruneAgent(ctx context.Context, tx *Tx, agent string, excess int64) (int64, int64, error) {
	var freed int64
	for excess > 0 {
		rows, err := tx.QueryContext(ctx, `SELECT id, bytes FROM job_fires WHERE agent = ? AND execution_id IS NULL
			AND status <> 'queued' ORDER BY id LIMIT ?`, agent, pruneBatch)
		if err != nil {
			return 0, 0, err
		}
		var batch []any
		for rows.Next() && excess > 0 {
			var id, n int64
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return 0, 0, err
			}
			batch, freed, excess = append(batch, id), freed+n, excess-n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
		if len(batch) == 0 {
			break
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM job_fires WHERE id IN (?`+strings.Repeat(", ?", len(batch)-1)+`)`, batch...); err != nil {
			return 0, 0, err
		}
	}
	if excess <= 0 {
		return 0, freed, nil
	}
	var newest string
	// "<> 'running'" rather than "= 'finished'", which made SQLite sort the agent's records.
	if err := tx.QueryRowContext(ctx, `SELECT id FROM executions WHERE agent = ? AND status <> 'running'
		ORDER BY started_at DESC, id DESC LIMIT 1`, agent).Scan(&newest); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, 0, err
	}
	var deleted int64
	c := pruneCursor{agent: agent}
	for excess > 0 && !c.done {
		batch, n, err := c.next(ctx, tx, newest, excess)
		if err != nil {
			return 0, 0, err
		}
		freed, excess = freed+n, excess-n
		if len(batch.commands) > 0 {
			in := `(?` + strings.Repeat(", ?", len(batch.commands)-1) + `)`
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_commands WHERE id IN `+in, batch.commands...); err != nil {
				return 0, 0, err
			}
		}
		if len(batch.records) == 0 {
			continue
		}
		in := `(?` + strings.Repeat(", ?", len(batch.records)-1) + `)`
		if _, err := tx.ExecContext(ctx, `DELETE FROM job_fires WHERE execution_id IN `+in, batch.records...); err != nil {
			return 0, 0, err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM executions WHERE status = 'finished' AND id IN `+in, batch.records...)
		if err != nil {
			return 0, 0, err
		}
		k, _ := res.RowsAffected()
		deleted += k
	}
	return deleted, freed, nil
}
