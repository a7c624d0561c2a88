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

// OpenKeys opens the store of cfg for managing API keys (`sandpit keys`), beside a daemon that
// may be using it: SQLite in WAL mode and PostgreSQL both take a second writer. The caller
// closes it.
func OpenKeys(ctx context.Context, cfg config.Config, log *slog.Logger) (*store.Store, error) {
	if cfg.DatabaseURL != "" {
		return store.OpenPostgres(ctx, cfg.DatabaseURL, 0, log)
	}
	dir, err := datadir.Canonical(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, filepath.Join(dir, store.FileName), log)
}
