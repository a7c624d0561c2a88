package app

import (
	"context"
	"log/slog"
	"math"
	"net/url"
	"path/filepath"

	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/secrets"
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
		Domain:      cfg.PortsHost(),
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

// KeysDatabase names the database OpenKeys opens for cfg, for a person: database_url's (its
// password hidden), else the data directory's SQLite file.
func KeysDatabase(cfg config.Config) string {
	if cfg.DatabaseURL != "" {
		if u, err := url.Parse(cfg.DatabaseURL); err == nil {
			return "the database of database_url " + u.Redacted()
		}
		return "the database of database_url"
	}
	return "the database of data directory " + cfg.DataDir + " (" + filepath.Join(cfg.DataDir, store.FileName) + ")"
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

// Secrets manages the secrets the egress proxy adds to requests, for `sandpit secrets`
// without a daemon; the caller closes it.
type Secrets struct {
	*secrets.Keeper
	Close func() error
}

// OpenSecrets opens the store of cfg and the secrets key (SANDPIT_SECRETS_KEY, else the data
// directory's secrets.key, made when there is none) for managing secrets beside a daemon that
// may be using them. lookup reads the environment (os.LookupEnv).
func OpenSecrets(ctx context.Context, cfg config.Config, lookup func(string) (string, bool), log *slog.Logger) (Secrets, error) {
	dir, err := datadir.Canonical(cfg.DataDir)
	if err != nil {
		return Secrets{}, err
	}
	var st *store.Store
	if cfg.DatabaseURL != "" {
		st, err = store.OpenPostgres(ctx, cfg.DatabaseURL, 0, log)
	} else {
		st, err = store.Open(ctx, filepath.Join(dir, store.FileName), log)
	}
	if err != nil {
		return Secrets{}, err
	}
	sealer, err := secrets.LoadCipher(dir, lookup, true)
	if err != nil {
		st.Close()
		return Secrets{}, err
	}
	return Secrets{Keeper: secrets.NewKeeper(st, sealer), Close: st.Close}, nil
}
