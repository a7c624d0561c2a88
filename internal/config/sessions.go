package config

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
)

// Sessions returns the limits of stateful sessions.
func (c Config) Sessions() engine.SessionConfig {
	return engine.SessionConfig{
		IdleTimeout:   time.Duration(c.SessionIdleTimeoutMS) * time.Millisecond,
		MaxLifetime:   time.Duration(c.SessionMaxLifetimeMS) * time.Millisecond,
		MaxPerAgent:   c.SessionsPerAgent,
		MaxTotal:      c.SessionsMax,
		ReadsMaxBytes: c.ReadsMaxBytes,
		Lifecycle: engine.LifecycleConfig{
			Dir:                filepath.Join(c.DataDir, HibernationDir),
			AutoPause:          c.SessionAutoPause,
			HibernateAfter:     time.Duration(c.SessionHibernateAfterMS) * time.Millisecond,
			HibernateOnStop:    c.SessionHibernateOnStop,
			SessionMemoryBytes: c.MemoryBytes,
			PausedMaxBytes:     c.SessionsPausedMaxBytes,
			HibernatedPerAgent: c.HibernatedPerAgent,
			HibernatedMaxBytes: c.HibernatedMaxBytes,
			HibernatedMaxAge:   time.Duration(c.HibernatedMaxAgeHours) * time.Hour,
		},
	}
}

// HibernationDir is where hibernated sessions' files are kept, in the data directory.
const HibernationDir = "hibernated"

// checkSessions checks the keys of sessions: their limits, caps, pauses and hibernations.
func (c Config) checkSessions(report *problems) {
	report.intRange("session_max_lifetime_ms", c.SessionMaxLifetimeMS, 1000, 86_400_000, " milliseconds (24 hours)")
	if c.SessionIdleTimeoutMS < 1000 || c.SessionIdleTimeoutMS > c.SessionMaxLifetimeMS {
		report.bad("session_idle_timeout_ms", "is %d; allowed range is 1000 to session_max_lifetime_ms (%d) milliseconds",
			c.SessionIdleTimeoutMS, c.SessionMaxLifetimeMS)
	}
	report.intRange("sessions_max", int64(c.SessionsMax), 0, 64, " sessions (each holds a container of its own)")
	report.intRange("warm_sessions", int64(c.WarmSessions), 0, 64, " session containers kept started and unclaimed (0 turns the pool off)")
	if c.SessionsMax > 0 && (c.SessionsPerAgent < 1 || c.SessionsPerAgent > c.SessionsMax) {
		report.bad("sessions_per_agent", "is %d; allowed range is 1 to sessions_max (%d)", c.SessionsPerAgent, c.SessionsMax)
	}
	report.intRange("session_hibernate_after_ms", c.SessionHibernateAfterMS, 0, 7*86_400_000, " milliseconds (0: never by time; at most 7 days)")
	report.intRange("sessions_paused_max_bytes", c.SessionsPausedMaxBytes, 0, 1<<40, " bytes (1 TiB)")
	report.intRange("hibernated_per_agent", int64(c.HibernatedPerAgent), 0, 1000, " sessions")
	report.intRange("hibernated_max_bytes", c.HibernatedMaxBytes, 0, 16<<40, " bytes (16 TiB)")
	report.intRange("hibernated_max_age_hours", c.HibernatedMaxAgeHours, 0, 87_600, " hours (10 years; 0: no age limit)")
	if c.E2BPool < 0 || c.E2BPool > c.SessionsPerAgent || (c.E2BPool > 0 && c.E2BPool >= c.SessionsMax) {
		report.bad("e2b_pool", "is %d; allowed range is 0 to sessions_per_agent (%d) and below sessions_max (%d): each warm sandbox is a session",
			c.E2BPool, c.SessionsPerAgent, c.SessionsMax)
	}
	for _, t := range c.E2BTemplates {
		if t == "" || strings.ContainsAny(t, " /,") || len(t) > 128 {
			report.bad("e2b_templates", "%q is not a template name: use up to 128 characters without spaces, '/' or ','", t)
		}
	}
}
