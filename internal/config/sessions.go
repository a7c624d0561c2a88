package config

import (
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Sessions returns the limits of stateful sessions.
func (c Config) Sessions() session.Config {
	return session.Config{
		IdleTimeout:   time.Duration(c.SessionIdleTimeoutMS) * time.Millisecond,
		MaxLifetime:   time.Duration(c.SessionMaxLifetimeMS) * time.Millisecond,
		MaxPerAgent:   c.SessionsPerAgent,
		MaxTotal:      c.SessionsMax,
		ReadsMaxBytes: c.ReadsMaxBytes,
		Pool:          c.SessionPool(),
		TemplatePools: maps.Clone(c.TemplatePools),
		Lifecycle: session.LifecycleConfig{
			Dir:                filepath.Join(c.DataDir, HibernationDir),
			AutoPause:          c.SessionAutoPause,
			HibernateAfter:     time.Duration(c.SessionHibernateAfterMS) * time.Millisecond,
			HibernateOnStop:    c.SessionHibernateOnStop,
			SessionMemoryBytes: c.MemoryBytes,
			PausedMaxBytes:     c.SessionsPausedMaxBytes,
			HibernatedPerAgent: c.HibernatedPerAgent,
			HibernatedMaxBytes: c.HibernatedMaxBytes,
			HibernatedMaxAge:   time.Duration(c.HibernatedMaxAgeHours) * time.Hour,
			FileMaxBytes:       2 * c.RunDirBytes,
		},
	}
}

// SessionPool returns the warm pool's configuration: e2b_pool warm sessions kept ready for
// every door, up to session_pool_max while creations outrun it, each having imported the
// fork servers' preload; it grows past its base only while the host keeps twice memory_bytes
// available.
func (c Config) SessionPool() session.PoolConfig {
	preload := c.Preload
	if !c.ForkServer {
		preload = nil
	}
	return session.PoolConfig{Base: c.E2BPool, Max: c.SessionPoolMax, Code: session.WarmCode(preload), MemoryFloor: 2 * c.MemoryBytes}
}

// PortLimits returns the bounds of the traffic to sessions' ports.
func (c Config) PortLimits() ports.Limits {
	return ports.Limits{
		PerSession:  c.PortConnectionsPerSession,
		PerAgent:    c.PortConnectionsPerAgent,
		IdleTimeout: time.Duration(c.PortIdleTimeoutMS) * time.Millisecond,
		MaxBytes:    c.PortConnectionMaxBytes,
	}
}

// PortsHost is the host under which sessions' ports have host names of their own
// ({port}-{session}.{host}): public_host, else localhost:{port} when the daemon listens on
// loopback, else "" (none).
func (c Config) PortsHost() string {
	if c.PublicHost != "" {
		return strings.ToLower(c.PublicHost)
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return "localhost:" + port
	}
	return ""
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
	report.intRange("session_pool_max", int64(c.SessionPoolMax), 0, 64, " warm sessions (held within sessions_per_agent and below sessions_max)")
	warm := c.E2BPool
	for _, key := range slices.Sorted(maps.Keys(c.TemplatePools)) {
		n := c.TemplatePools[key]
		owner, name, ok := strings.Cut(key, "/")
		if !ok || !sandbox.ValidAgent(owner) || !template.ValidName(name) {
			report.bad("template_pools", "has key %q; name each template OWNER/NAME, the agent that built it and its name (e.g. \"alice/tools\")", key)
			continue
		}
		if n < 1 || n > c.SessionsPerAgent {
			report.bad("template_pools", "gives %q %d warm sessions; allowed range is 1 to sessions_per_agent (%d) (leave the template out for none)", key, n, c.SessionsPerAgent)
			continue
		}
		warm += n
	}
	if len(c.TemplatePools) > 0 && c.Runtime == RuntimeKubernetes && !c.Kubernetes.Templates() {
		report.bad("template_pools", "is set, but runtime \"kubernetes\" has templates only where kubernetes.template_registry or kubernetes.template_import_command brings their images to the nodes; set one or remove template_pools")
	}
	if len(c.TemplatePools) > 0 && warm >= c.SessionsMax {
		report.bad("template_pools", "with e2b_pool keeps %d warm sessions; all of them must stay below sessions_max (%d): each is a session", warm, c.SessionsMax)
	}
	report.intRange("port_connections_per_session", int64(c.PortConnectionsPerSession), 1, 4096, " requests in flight")
	report.intRange("port_connections_per_agent", int64(c.PortConnectionsPerAgent), 1, 16384, " requests in flight")
	report.intRange("port_idle_timeout_ms", c.PortIdleTimeoutMS, 1000, 86_400_000, " milliseconds (24 hours)")
	report.intRange("port_connection_max_bytes", c.PortConnectionMaxBytes, 1<<20, 1<<40, " bytes (1 MiB to 1 TiB)")
	if c.PublicHost != "" && (strings.ContainsAny(c.PublicHost, "/ @?#") || strings.HasPrefix(c.PublicHost, ".")) {
		report.bad("public_host", "%q is not a host name: give a name and an optional port, e.g. sandpit.example.com or localhost:8765", c.PublicHost)
	}
	for _, t := range c.E2BTemplates {
		if t == "" || strings.ContainsAny(t, " /,") || len(t) > 128 {
			report.bad("e2b_templates", "%q is not a template name: use up to 128 characters without spaces, '/' or ','", t)
		}
	}
}

// Templates returns the bounds of template builds (docs/templates.md); their pip steps use
// the daemon's index settings.
func (c Config) Templates() template.Config {
	return template.Config{
		DefaultBase:       c.BaseImage,
		SandboxRepository: c.ImageRepository,
		BuildTimeout:      time.Duration(c.TemplateBuildTimeoutMS) * time.Millisecond,
		MaxImageBytes:     c.TemplateMaxBytes,
		PerAgent:          c.TemplatesPerAgent,
		VersionsKept:      c.TemplateVersionsKept,
		Pip: protocol.PipOptions{IndexURL: c.IndexURL, ExtraIndexURLs: c.ExtraIndexURLs,
			TrustedHosts: c.TrustedHosts, BinaryOnly: c.BinaryOnly},
	}
}
