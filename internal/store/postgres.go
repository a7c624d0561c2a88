package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// PostgreSQL as the store's database, for several daemons sharing one ledger, code library,
// knowledge store and job schedule (config database_url). The schema is the SQLite one in
// PostgreSQL's types (migrations_pg, migrated with goose), with two differences: full-text
// matching uses a tsvector column with a GIN index instead of FTS5 (ranking stays the store's
// own BM25 over the agent's rows, rank.go), and runs' output files are kept in the database
// (execution_files.content) so that every daemon serves them.

// maxAttempts bounds how many times a transaction PostgreSQL could not serialize is run.
const maxAttempts = 20

// OpenPostgres opens the PostgreSQL database at url (postgres://user:password@host:port/db?…,
// or the key=value form) through github.com/jackc/pgx/v5 and migrates it to the current
// schema. maxConns bounds the connections this daemon opens (0: 10; at least 2). log may be nil. Errors
// name the database without its password.
func OpenPostgres(ctx context.Context, url string, maxConns int, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxConns <= 0 {
		maxConns = 10
	}
	// Migrating holds one connection for its lock while goose uses another.
	maxConns = max(maxConns, 2)
	shown := RedactURL(url)
	if _, err := pgconn.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("database_url %s is not a PostgreSQL connection URL (postgres://user:password@host:5432/database): %w", shown, redactErr(err, url))
	}
	sqlDB, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("opening the database %s: %w", shown, redactErr(err, url))
	}
	sqlDB.SetMaxOpenConns(maxConns)
	sqlDB.SetMaxIdleConns(maxConns)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("connecting to the database %s (database_url): %w", shown, redactErr(err, url))
	}
	// Several daemons may start at once: one migrates while the others wait for its lock.
	if err := migrateLocked(ctx, sqlDB); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("migrating the database %s: %w", shown, redactErr(err, url))
	}
	d := &dbx{DB: sqlDB, pg: true}
	s := &Store{w: d, r: d, pg: true, url: url, log: log, now: time.Now, quotas: DefaultQuotas(), ledger: newLedgerBytes()}
	if err := s.countLedgerBytes(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("counting the ledger's bytes in %s: %w", shown, redactErr(err, url))
	}
	return s, nil
}

// migrationLock is the PostgreSQL advisory lock held while the schema is migrated.
const migrationLock = 0x73616e6470697400 // "sandpit\0"

// migrateLocked migrates db under an advisory lock, on one connection.
func migrateLocked(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLock)); err != nil {
		return err
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLock))
	}()
	return migrate(ctx, db, true)
}

// retryable says whether err is PostgreSQL's answer to a transaction it could not serialize
// with a concurrent one (or a deadlock): the transaction may be run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// pause waits before attempt+1 of a transaction: a few milliseconds, growing.
func pause(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(attempt*attempt) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RedactURL returns a database URL with its password replaced by "xxxxx", for messages.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if strings.Contains(raw, "password=") {
			return "(a database_url with a password)"
		}
		return raw
	}
	return u.Redacted()
}

// redactErr keeps the URL's password out of err's message.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(err.Error(), pw) {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

// Postgres says whether the store's database is PostgreSQL.
func (s *Store) Postgres() bool { return s.pg }

// PingPostgres connects to the PostgreSQL database at url without changing it and returns its
// server version and how many daemons have recorded a heartbeat there (0 before the schema
// exists). Errors name the database without its password.
func PingPostgres(ctx context.Context, url string) (version string, daemons int, err error) {
	shown := RedactURL(url)
	db, err := sql.Open("pgx", url)
	if err != nil {
		return "", 0, fmt.Errorf("database_url %s: %w", shown, redactErr(err, url))
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return "", 0, fmt.Errorf("connecting to the database %s (database_url): %w", shown, redactErr(err, url))
	}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('daemons') IS NOT NULL`).Scan(&exists); err == nil && exists {
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM daemons`).Scan(&daemons)
	}
	return version, daemons, nil
}
