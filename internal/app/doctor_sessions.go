package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandpit-dev/sandpit/internal/config"
)

// hibernationCheck reports the budgets of paused and hibernated sessions, what the
// hibernation files on disk hold of hibernated_max_bytes, and whether the disk has room for it.
func hibernationCheck(cfg config.Config) Check {
	dir := filepath.Join(cfg.DataDir, config.HibernationDir)
	var files int
	var used int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".tar") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			files++
			used += fi.Size()
		}
	}
	c := Check{Name: "session hibernation", OK: true, Detail: fmt.Sprintf(
		"%d hibernated sessions hold %s of hibernated_max_bytes %s in %s; at most %d per agent (hibernated_per_agent), kept %d hours (hibernated_max_age_hours); paused sessions may hold %s (sessions_paused_max_bytes), each counted at memory_bytes",
		files, config.FormatSize(used), config.FormatSize(cfg.HibernatedMaxBytes), dir, cfg.HibernatedPerAgent, cfg.HibernatedMaxAgeHours,
		config.FormatSize(cfg.SessionsPausedMaxBytes))}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(cfg.DataDir, &fs); err == nil {
		if free := int64(fs.Bavail) * int64(fs.Bsize); free+used < cfg.HibernatedMaxBytes {
			c.OK = false
			c.Detail += fmt.Sprintf("; %s has %s free, less than hibernated_max_bytes", cfg.DataDir, config.FormatSize(free))
			c.Fix = "free disk space, or lower hibernated_max_bytes: a hibernation that finds the disk full fails and leaves its session paused"
		}
	}
	return c
}
