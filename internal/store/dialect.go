package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The store writes its queries once, in the SQL both backends speak, with "?" placeholders.
// dbx and Tx wrap database/sql so that on PostgreSQL each query's placeholders become $1, $2…
// and its arguments fit PostgreSQL's types (see pgArg). What the two dialects say differently
// is chosen with Store.pg.

// dbx is a database handle of the store's dialect.
type dbx struct {
	*sql.DB
	pg bool
}

// Tx is a write transaction of the store's dialect.
type Tx struct {
	tx *sql.Tx
	pg bool
}

func (d *dbx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	q, args = rebind(d.pg, q, args)
	return d.DB.ExecContext(ctx, q, args...)
}

func (d *dbx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	q, args = rebind(d.pg, q, args)
	return d.DB.QueryContext(ctx, q, args...)
}

func (d *dbx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	q, args = rebind(d.pg, q, args)
	return d.DB.QueryRowContext(ctx, q, args...)
}

func (t *Tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	q, args = rebind(t.pg, q, args)
	return t.tx.ExecContext(ctx, q, args...)
}

func (t *Tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	q, args = rebind(t.pg, q, args)
	return t.tx.QueryContext(ctx, q, args...)
}

func (t *Tx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	q, args = rebind(t.pg, q, args)
	return t.tx.QueryRowContext(ctx, q, args...)
}

// rebind returns q and args for the dialect: unchanged for SQLite; for PostgreSQL with
// numbered placeholders and arguments converted by pgArg.
func rebind(pg bool, q string, args []any) (string, []any) {
	if !pg {
		return q, args
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = pgArg(a)
	}
	return b.String(), out
}

// pgArg converts an argument for PostgreSQL. Booleans are stored as integers 0 and 1 (as in
// SQLite, so that both schemas and queries read alike). Text may not hold NUL bytes or invalid
// UTF-8 in PostgreSQL: a run's output (hostile code writes what it likes) keeps each such byte
// as U+FFFD instead of failing the ledger's write.
func pgArg(a any) any {
	switch v := a.(type) {
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case *bool:
		if v == nil {
			return nil
		}
		return pgArg(*v)
	case string:
		return pgText(v)
	case sql.NullString:
		if v.Valid {
			v.String = pgText(v.String)
		}
		return v
	case sql.NullBool:
		if !v.Valid {
			return nil
		}
		return pgArg(v.Bool)
	}
	return a
}

// pgText returns s with each NUL byte and invalid UTF-8 sequence replaced by U+FFFD.
func pgText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// noLimit is a LIMIT clause that does not limit, for an OFFSET.
func (s *Store) noLimit() string {
	if s.pg {
		return "LIMIT ALL"
	}
	return "LIMIT -1"
}
