package session

import "time"

// Config bounds sessions.
type Config struct {
	// IdleTimeout and MaxLifetime are the defaults of a session's limits; MaxLifetime is also
	// the most either may be.
	IdleTimeout, MaxLifetime time.Duration
	// MaxPerAgent caps an agent's active sessions; MaxTotal all of them (0: sessions are off).
	MaxPerAgent, MaxTotal int
	// Lifecycle bounds pauses and hibernations.
	Lifecycle LifecycleConfig
	// ReadsMaxBytes is the daemon-wide budget of file-read bytes in flight (see reads.go);
	// 0 is DefaultReadsMaxBytes, and it is raised to hold the largest read.
	ReadsMaxBytes int64
	// Pool is the warm pool every creation claims from (pool.go); its zero value is none.
	Pool PoolConfig
	// TemplatePools are the warm pools of templates (pool.go): by OWNER/NAME, how many warm
	// sessions of it are kept ready, each warmed with Pool.Code. Empty: none.
	TemplatePools map[string]int
}

// DefaultConfig: 10 minutes idle, 1 hour at most, 8 per agent, 16 in all (an idle session
// holds about 100 MiB, a busy one up to memory_bytes: 16 of 512 MiB fit a machine of 8 GiB;
// 2 and 4 were met in a new user's first minutes with the E2B SDK, its warm pool counting).
func DefaultConfig() Config {
	return Config{IdleTimeout: 10 * time.Minute, MaxLifetime: time.Hour, MaxPerAgent: 8, MaxTotal: 16}
}

// LifecycleConfig bounds pauses and hibernations. Zero values turn each feature off.
type LifecycleConfig struct {
	// Dir is where hibernation files are written (one <session ID>.tar each); "" turns
	// hibernation (and fork) off.
	Dir string
	// Daemon is this daemon's ID, recorded with each hibernation.
	Daemon string
	// AutoPause is the default of a new session's auto_pause (session_auto_pause).
	AutoPause bool
	// HibernateAfter hibernates a session paused that long (session_hibernate_after_ms; 0:
	// never by time). HibernateOnStop hibernates every session when the daemon stops
	// (session_hibernate_on_stop); otherwise they end (daemon_stopped).
	HibernateAfter  time.Duration
	HibernateOnStop bool
	// SessionMemoryBytes is what each paused session counts against PausedMaxBytes: its
	// container's memory limit (memory_bytes), which bounds what it holds.
	SessionMemoryBytes int64
	// PausedMaxBytes bounds the memory of all paused sessions (sessions_paused_max_bytes).
	PausedMaxBytes int64
	// HibernatedPerAgent caps an agent's hibernated sessions (hibernated_per_agent);
	// HibernatedMaxBytes the bytes of all hibernation files (hibernated_max_bytes);
	// HibernatedMaxAge how long one is kept (hibernated_max_age_hours; 0: no limit).
	HibernatedPerAgent int
	HibernatedMaxBytes int64
	HibernatedMaxAge   time.Duration
	// FileMaxBytes bounds one session's hibernation file or fork copy (0: only by
	// HibernatedMaxBytes): twice its disk (run_dir_bytes), as an archive of files that fit it
	// takes at most their bytes and a header of each name; many long names of few bytes (hard
	// links, empty files) would make it far larger than what they hold.
	FileMaxBytes int64
}

// Stats are the counts /v1/limits, doctor and /metrics show.
type Stats struct {
	Active          int
	Paused          int
	PausedBytes     int64
	Hibernated      int
	HibernatedBytes int64
}
