package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
		address := Advertised(cfg.Listen)
		if err := checkDaemonID(ctx, st, id, address); err != nil {
			st.Close()
			return nil, err
		}
		if err := st.Heartbeat(ctx, address); err != nil {
			st.Close()
			return nil, fmt.Errorf("recording this daemon (%s) in the database: %w", id, err)
		}
		log.Info("the store is PostgreSQL, shared with other daemons", "database", store.RedactURL(cfg.DatabaseURL), "daemon_id", id)
	}
	return st, nil
}

// checkDaemonID refuses id when another live daemon uses it: its heartbeat is within the
// lease and it answers at another address. Two daemons with one ID would each record the
// other's runs as interrupted. A daemon that restarts at its own address (or on port 0,
// whose address is not known yet) is let in.
func checkDaemonID(ctx context.Context, st *store.Store, id, address string) error {
	d, err := st.GetDaemon(ctx, id)
	if err != nil || strings.HasSuffix(address, ":0") || d.Address == address {
		return nil
	}
	if age := time.Since(d.HeartbeatAt); age < store.DefaultLease {
		return fmt.Errorf("daemon_id %q is in use by the daemon at %s, whose last heartbeat was %s ago: give this daemon its own daemon_id (or stop that one; its ID is free %s after its last heartbeat)",
			id, d.Address, age.Round(time.Second), store.DefaultLease)
	}
	return nil
}

// Advertised returns the address other daemons name this one by: listen (host:port), with a
// wildcard or empty host replaced by this machine's name (a container's, in a container).
func Advertised(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			return net.JoinHostPort(name, port)
		}
	}
	return listen
}

// daemonID returns cfg's daemon_id, or the ID kept in the data directory (made on first use).
// storedDaemonID is the daemon's ID as daemonID finds it, without making one: "" when
// daemon_id is not set and the data directory keeps none.
func storedDaemonID(cfg config.Config) (string, error) {
	if cfg.DaemonID != "" {
		return cfg.DaemonID, nil
	}
	path := filepath.Join(cfg.DataDir, DaemonIDFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the daemon's ID from %s: %w (or set daemon_id)", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

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
