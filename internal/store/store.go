// Package store keeps sandpit's state in a SQL database: the execution ledger (with the
// calls, logs, egress and output files of each run), saved code with its versions, jobs and
// their fires, the knowledge store (memories, facts, graph, documents, results, under their
// quotas), stateful sessions' records, and the daemons' heartbeats and leases. Open opens a
// SQLite database (modernc.org/sqlite, no cgo), one daemon's default; OpenPostgres a
// PostgreSQL one (postgres.go) that several daemons share. The schema is migrated with goose
// from the embedded migrations directory of its dialect when the store opens.
//
// SQLite runs in WAL mode with a busy timeout. Writes go through one connection, so they
// never contend with each other; reads use a small pool of their own and see the last
// committed state. On PostgreSQL both use one pool, and write transactions run at
// SERIALIZABLE and are retried when they could not be serialized. Times are stored as Unix
// milliseconds in UTC.
//
// Errors: lookups of something that does not exist return an error wrapping ErrNotFound;
// creating what exists wraps ErrExists; an update that expected another version returns a
// *VersionConflictError; deleting code that jobs use returns an *InUseError.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

//go:embed migrations/*.sql migrations_pg/*.sql
var migrations embed.FS

// ErrNotFound means the thing asked for does not exist (class errclass.NotFound).
var ErrNotFound = errclass.New(errclass.NotFound, "not found")

// ErrExists means the thing to create exists already (class errclass.Conflict).
var ErrExists = errclass.New(errclass.Conflict, "already exists")

// VersionConflictError means an update expected another version than the current one.
type VersionConflictError struct {
	Expected, Current int
}

// Is makes a VersionConflictError of class errclass.Conflict.
func (e *VersionConflictError) Is(target error) bool { return target == errclass.Conflict }

func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("version conflict: the update expected version %d but the current version is %d; fetch it, merge, and send expected_version %d",
		e.Expected, e.Current, e.Current)
}

// InUseError means saved code cannot be deleted because jobs run it.
type InUseError struct {
	Jobs []string // the IDs of the jobs
}

// Is makes an InUseError of class errclass.Conflict.
func (e *InUseError) Is(target error) bool { return target == errclass.Conflict }

func (e *InUseError) Error() string {
	return fmt.Sprintf("the code is used by %d job(s) %v; delete or change them first, or delete with force=true, which also disables them",
		len(e.Jobs), e.Jobs)
}

// Store is the open database. It is safe for concurrent use.
type Store struct {
	w *dbx // SQLite: one connection, every write goes through it; PostgreSQL: the pool
	r *dbx // readers (PostgreSQL: the same pool as w)
	// pg says the database is PostgreSQL (OpenPostgres), not SQLite.
	pg bool
	// daemon is this daemon's ID (SetDaemon), recorded with the executions it runs and the
	// fires it claims; "" until set.
	daemon string
	// url is the PostgreSQL connection URL (OpenPostgres), "" for SQLite.
	url string
	log *slog.Logger
	now func() time.Time
	// quotas bound each agent's stored results (see quota.go).
	quotas Quotas
	// files keeps runs' output files, deleted with their records; nil until OpenFiles.
	files *Files
	// retention is what the ledger is held to (SetRetention); ledger counts the bytes of its
	// records (see ledger.go).
	retention Retention
	ledger    ledgerBytes
}

// FileName is the database's file name inside the data directory.
const FileName = "sandpit.db"

// Open opens (creating it if needed, mode 0600) the database at path and migrates it to the
// current schema. log may be nil.
func Open(ctx context.Context, path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := private(path); err != nil {
		return nil, fmt.Errorf("opening the database %s: %w", path, err)
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	wdb, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode()+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("opening the database %s: %w", path, err)
	}
	w := &dbx{DB: wdb}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("opening the database %s: %w", path, err)
	}
	// Not fatal: a full disk must not keep the daemon from starting (it says so per request).
	if converted, err := useIncrementalVacuum(ctx, w); err != nil {
		log.Warn("the database keeps the space of deleted rows for reuse instead of giving it back to the file system; free disk space and restart to switch",
			"path", path, "error", err)
	} else if converted {
		log.Info("the database now gives the space of deleted rows back to the file system (auto_vacuum incremental)", "path", path)
	}
	if err := migrate(ctx, w.DB, false); err != nil {
		w.Close()
		return nil, fmt.Errorf("migrating the database %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("opening the database %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(4)
	s := &Store{w: w, r: &dbx{DB: rdb}, log: log, now: time.Now, quotas: DefaultQuotas(), ledger: newLedgerBytes()}
	if err := s.dropAgentIndexes(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("indexing the knowledge of %s: %w", path, err)
	}
	if err := s.countLedgerBytes(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("counting the ledger's bytes in %s: %w", path, err)
	}
	return s, nil
}

func migrate(ctx context.Context, db *sql.DB, pg bool) error {
	sub, dialect := "migrations", goose.DialectSQLite3
	if pg {
		sub, dialect = "migrations_pg", goose.DialectPostgres
	}
	dir, err := fs.Sub(migrations, sub)
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(dialect, db, dir, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	return err
}

// Close closes the database.
func (s *Store) Close() error {
	if s.r == s.w {
		return s.w.Close()
	}
	return errors.Join(s.r.Close(), s.w.Close())
}

// tx runs fn in a write transaction, committing when it returns nil. On PostgreSQL the
// transaction is SERIALIZABLE, so that every transaction sees the database as if it ran alone
// (as SQLite's one writer does), and is run again (fn with it) when PostgreSQL could not
// serialize it with a concurrent one: fn must only read and write through tx.
func (s *Store) tx(ctx context.Context, fn func(*Tx) error) error {
	var opts *sql.TxOptions
	if s.pg {
		opts = &sql.TxOptions{Isolation: sql.LevelSerializable}
	}
	for attempt := 1; ; attempt++ {
		sqlTx, err := s.w.BeginTx(ctx, opts)
		if err != nil {
			return err
		}
		tx := &Tx{tx: sqlTx, pg: s.pg}
		err = fn(tx)
		if err == nil {
			err = sqlTx.Commit()
		} else {
			_ = sqlTx.Rollback()
		}
		if err == nil || !s.pg || !retryable(err) || attempt >= maxAttempts {
			return err
		}
		if err := pause(ctx, attempt); err != nil {
			return err
		}
	}
}

// ms converts t to Unix milliseconds; the zero time is NULL.
func ms(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// fromMS converts Unix milliseconds to a UTC time; NULL is the zero time.
func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// Page bounds a listing: at most Limit items after Cursor (a next_cursor from the previous
// page; empty for the first page).
type Page struct {
	Cursor string
	Limit  int
}

// DefaultLimit and MaxLimit bound a page's Limit (0 means DefaultLimit).
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

func (p Page) limit() int {
	switch {
	case p.Limit <= 0:
		return DefaultLimit
	case p.Limit > MaxLimit:
		return MaxLimit
	}
	return p.Limit
}

// private creates the database file at path with mode 0600 when it is missing, and takes the
// group's and others' permissions from it and its write-ahead log and shared-memory files when
// they have any (SQLite creates the database 0644, then gives the other two the database's
// mode): the database holds every run's code, input and output.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue // not there yet
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// ID returns the store's ID, 32 hex digits made when its schema was first migrated: the same
// for every daemon of one database, another for another database (template.Store).
func (s *Store) ID(ctx context.Context) (string, error) {
	var id string
	if err := s.r.QueryRowContext(ctx, `SELECT id FROM store_id`).Scan(&id); err != nil {
		return "", fmt.Errorf("reading the store's ID: %w", err)
	}
	return id, nil
}
