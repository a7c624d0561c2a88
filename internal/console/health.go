package console

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The health page: readiness, slots, the fork server, starts and recent sandbox errors.

type healthView struct {
	Ready       string
	Warmth      *sandbox.Warmth
	Stats       engine.Stats
	Config      engine.Config
	ForkServer  ForkServer
	Resets      int64
	HasResets   bool
	Starts      map[string]int
	StartsOf    int
	Errors      []store.ExecutionSummary
	LedgerError string
}

func (c *Console) healthPage(w http.ResponseWriter, r *http.Request, l login) {
	v := healthView{Stats: c.cfg.Engine.Stats(), Config: c.cfg.Engine.Config(), ForkServer: c.cfg.ForkServer, Starts: map[string]int{}}
	if c.cfg.ForkServer.Warmth != nil {
		w := c.cfg.ForkServer.Warmth()
		v.Warmth = &w
	}
	if err := c.cfg.Engine.Ready(r.Context()); err != nil {
		v.Ready = err.Error()
	}
	if c.cfg.Resets != nil {
		v.Resets, v.HasResets = c.cfg.Resets(), true
	}
	if c.cfg.Ledger != nil {
		recent, _, err := c.cfg.Ledger.ListExecutions(r.Context(), store.ExecutionFilter{}, store.Page{Limit: store.MaxLimit})
		if err == nil {
			for _, e := range recent {
				if e.Start != "" {
					v.Starts[string(e.Start)]++
					v.StartsOf++
				}
			}
			v.Errors, _, err = c.cfg.Ledger.ListExecutions(r.Context(), store.ExecutionFilter{Outcome: sandbox.OutcomeSandboxError}, store.Page{Limit: 10})
		}
		if err != nil {
			c.log.Error("console: health", "error", err)
			v.LedgerError = "Reading the ledger failed; the daemon log has the details."
		}
	}
	c.render(w, r, http.StatusOK, "health", l.page("Health", "health", v))
}
