package config

import (
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
)

// Sessions returns the limits of stateful sessions.
func (c Config) Sessions() engine.SessionConfig {
	return engine.SessionConfig{
		IdleTimeout: time.Duration(c.SessionIdleTimeoutMS) * time.Millisecond,
		MaxLifetime: time.Duration(c.SessionMaxLifetimeMS) * time.Millisecond,
		MaxPerAgent: c.SessionsPerAgent,
		MaxTotal:    c.SessionsMax,
	}
}

// checkSessions checks session_idle_timeout_ms, session_max_lifetime_ms, sessions_per_agent
// and sessions_max.
func (c Config) checkSessions(report *problems) {
	report.intRange("session_max_lifetime_ms", c.SessionMaxLifetimeMS, 1000, 86_400_000, " milliseconds (24 hours)")
	if c.SessionIdleTimeoutMS < 1000 || c.SessionIdleTimeoutMS > c.SessionMaxLifetimeMS {
		report.bad("session_idle_timeout_ms", "is %d; allowed range is 1000 to session_max_lifetime_ms (%d) milliseconds",
			c.SessionIdleTimeoutMS, c.SessionMaxLifetimeMS)
	}
	report.intRange("sessions_max", int64(c.SessionsMax), 0, 64, " sessions (each holds a container of its own)")
	if c.SessionsMax > 0 && (c.SessionsPerAgent < 1 || c.SessionsPerAgent > c.SessionsMax) {
		report.bad("sessions_per_agent", "is %d; allowed range is 1 to sessions_max (%d)", c.SessionsPerAgent, c.SessionsMax)
	}
	for _, t := range c.E2BTemplates {
		if t == "" || strings.ContainsAny(t, " /,") || len(t) > 128 {
			report.bad("e2b_templates", "%q is not a template name: use up to 128 characters without spaces, '/' or ','", t)
		}
	}
}
