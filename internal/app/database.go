package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// DaemonIDFile is the file in the data directory that keeps the daemon's ID when daemon_id is
// not set.
const DaemonIDFile = "daemon-id"

// openStore opens the store cfg names: PostgreSQL at database_url, else SQLite in the data
// directory. It sets the daemon's ID (daemon_id, or the one kept in the data directory) and,
// on PostgreSQL, records the daemon's first heartbeat.
func openStore(ctx context.Context, cfg config.Config, log *slog.Logger) (*store.Store, error) {
	id, err := daemonID(cfg)
	if err != nil {
		return nil, err
	}
	var st *store.Store
	if cfg.DatabaseURL != "" {
		st, err = store.OpenPostgres(ctx, cfg.DatabaseURL, 0, log)
	} else {
		st, err = store.Open(ctx, filepath.Join(cfg.DataDir, store.FileName), log)
	}
	if err != nil {
		return nil, err
	}
	st.SetDaemon(id)
	if st.Postgres() {
		if err := st.Heartbeat(ctx, cfg.Listen); err != nil {
			st.Close()
			return nil, fmt.Errorf("recording this daemon (%s) in the database: %w", id, err)
		}
		log.Info("the store is PostgreSQL, shared with other daemons", "database", store.RedactURL(cfg.DatabaseURL), "daemon_id", id)
	}
	return st, nil
}

// daemonID returns cfg's daemon_id, or the ID kept in the data directory (made on first use).
func daemonID(cfg config.Config) (string, error) {
	if cfg.DaemonID != "" {
		return cfg.DaemonID, nil
	}
	path := filepath.Join(cfg.DataDir, DaemonIDFile)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the daemon's ID from %s: %w (or set daemon_id)", path, err)
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		if c < 128 && (c == '-' || c == '.' || c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')) {
			return c
		}
		return -1
	}, host)
	if len(host) > 40 {
		host = host[:40]
	}
	id := strings.TrimPrefix(host+"-"+hex.EncodeToString(r[:]), "-")
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keeping the daemon's ID in %s: %w (or set daemon_id)", path, err)
	}
	return id, nil
}

// heartbeat records that the daemon is alive every lease/3, and finalises what daemons whose
// heartbeat is older than the lease left running, until ctx ends. Only on PostgreSQL.
func (e *Core) heartbeat(ctx context.Context, address string, log *slog.Logger) {
	if !e.Store.Postgres() {
		return
	}
	tick := time.NewTicker(store.DefaultLease / 3)
	defer tick.Stop()
	for {
		if err := e.Store.Heartbeat(ctx, address); err != nil && ctx.Err() == nil {
			log.Error("recording this daemon's heartbeat failed; other daemons take over its runs and fires once its lease expires",
				"error", err, "lease", store.DefaultLease)
		}
		if _, err := e.Store.RecoverExpired(ctx, store.DefaultLease); err != nil && ctx.Err() == nil {
			log.Error("recovering the runs and fires of stopped daemons failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// jobsConfig is the scheduler's configuration for st: on PostgreSQL it also polls the
// database, where other daemons change jobs and leave queued fires.
func jobsConfig(st *store.Store, maxTimeout time.Duration) jobs.Config {
	c := jobs.Config{MaxTimeout: maxTimeout}
	if st.Postgres() {
		c.Poll = 2 * time.Second
	}
	return c
}
