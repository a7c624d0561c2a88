package app

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"

	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/store"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/e2b"
)

// E2BPrefix is the path under which the daemon serves the E2B-compatible API: the SDKs'
// E2B_API_URL and E2B_SANDBOX_URL are both http://HOST:PORT/e2b.
const E2BPrefix = "/e2b"

// E2BConfig is what the configuration says of E2B sandboxes.
func E2BConfig(cfg config.Config) e2b.Config {
	return e2b.Config{
		Templates:   cfg.E2BTemplates,
		MaxLifetime: cfg.Sessions().MaxLifetime,
		ExecTimeout: cfg.Sandbox().MaxTimeout,
		Network:     cfg.Network,
		CPUs:        int(math.Ceil(cfg.CPUs)),
		MemoryMB:    int(cfg.MemoryBytes >> 20),
		DiskMB:      int(cfg.TmpBytes >> 20),
		Pool:        cfg.E2BPool,
	}
}

// APIKey is an API key's record as `sandpit keys` shows it (never the key itself).
type APIKey = store.APIKey

// Keys manages the API keys of the E2B-compatible API; *store.Store is one.
type Keys interface {
	// CreateAPIKey makes a key for agent, returned once with its record.
	CreateAPIKey(ctx context.Context, agent, name string) (string, APIKey, error)
	// ListAPIKeys lists agent's keys ("" for every agent's), revoked ones too.
	ListAPIKeys(ctx context.Context, agent string) ([]APIKey, error)
	// RevokeAPIKey revokes a key by its ID or the key itself.
	RevokeAPIKey(ctx context.Context, idOrKey string) (APIKey, error)
	Close() error
}

// OpenKeys opens the store of cfg for managing API keys (`sandpit keys`), beside a daemon that
// may be using it: SQLite in WAL mode and PostgreSQL both take a second writer. The caller
// closes it.
func OpenKeys(ctx context.Context, cfg config.Config, log *slog.Logger) (Keys, error) {
	if cfg.DatabaseURL != "" {
		return store.OpenPostgres(ctx, cfg.DatabaseURL, 0, log)
	}
	dir, err := datadir.Canonical(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, filepath.Join(dir, store.FileName), log)
}
