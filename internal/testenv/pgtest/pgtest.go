// Package pgtest gives tests a PostgreSQL database of their own: a fresh schema in the database
// SANDPIT_TEST_DATABASE_URL names, dropped when the test ends. Without that variable the test
// is skipped, or fails when SANDPIT_REQUIRE_POSTGRES=1 (CI). Only tests import it.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// Env is the variable naming the test database (postgres://user:password@host:port/db).
const Env = "SANDPIT_TEST_DATABASE_URL"

// Available says whether a test database is configured.
func Available() bool { return os.Getenv(Env) != "" }

// Base returns SANDPIT_TEST_DATABASE_URL, skipping t when it is unset (failing it when
// SANDPIT_REQUIRE_POSTGRES=1).
func Base(t testing.TB) string {
	t.Helper()
	base := os.Getenv(Env)
	if base == "" {
		if os.Getenv("SANDPIT_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("%s is unset and SANDPIT_REQUIRE_POSTGRES=1: set it to a PostgreSQL database the tests may create schemas in", Env)
		}
		t.Skipf("PostgreSQL tests skipped: set %s (postgres://user:password@host:5432/db) to run them", Env)
	}
	return base
}

// URL returns a connection URL to a new, empty schema of the test database (its search_path),
// dropped with everything in it when t ends.
func URL(t testing.TB) string {
	t.Helper()
	base := Base(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "sandpit_test_" + hex.EncodeToString(b[:])
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		t.Fatalf("creating a schema in the test database (%s): %v", Env, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Logf("dropping test schema %s: %v", schema, err)
		}
		db.Close()
	})
	return WithSearchPath(base, schema)
}

// WithSearchPath returns the connection URL base with its search_path set to schema.
func WithSearchPath(base, schema string) string {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		// The key=value form.
		return strings.TrimSpace(base) + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
