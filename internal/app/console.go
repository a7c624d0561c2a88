package app

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/console"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// withConsole serves the web console at /ui and /ui/ beside authed, the API behind its token
// check. The console authenticates its own requests (the bearer token, or the login cookie
// of its sign-in form) and reaches the API through api, the handler without the token check;
// the cookie is valid for /ui only, so it opens nothing of the API directly.
func withConsole(cfg config.Config, eng *Core, api, authed http.Handler, log *slog.Logger) (http.Handler, error) {
	ui, err := console.New(console.Config{
		Token:      cfg.Token,
		API:        api,
		Engine:     eng.Service,
		Ledger:     eng.Store,
		Jobs:       eng.Jobs,
		Code:       eng.Library,
		Sessions:   consoleSessions{eng.Sessions},
		Templates:  consoleTemplates(eng),
		ForkServer: console.ForkServer{Enabled: cfg.ForkServer, Preload: cfg.Preload, MaxRuns: cfg.ForkServerMaxRuns, Warmth: eng.Runtime.Warmth},
		Resets:     eng.Runtime.Resets,
	}, log)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	mux.Handle("/", authed)
	return mux, nil
}

// consoleSessions lets the console look into sessions: Look is the registry's Get, as the
// console's interface.
type consoleSessions struct{ *session.Registry }

func (c consoleSessions) Look(ctx context.Context, agent, id string) (console.Files, error) {
	s, err := c.Get(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// consoleTemplates is the console's view of e's templates (nil without them: its pages say so).
func consoleTemplates(e *Core) console.Templates {
	if e.Templates == nil {
		return nil
	}
	return e.Templates
}
