package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

var _ sandbox.StatsReader = (*sessionBox)(nil)

// Stats reads one sample of what the session's container uses (sandbox.StatsReader): the
// engine's CPU and memory of its cgroup, CPU as a share of the box's quota between the
// engine's last two samples (about a second apart, so a call takes about that long), and the
// session home's tmpfs from df in the container.
func (b *sessionBox) Stats(ctx context.Context) (sandbox.BoxStats, error) {
	res, err := b.r.api.ContainerStats(ctx, b.containerID, client.ContainerStatsOptions{IncludePreviousSample: true})
	if err != nil {
		return sandbox.BoxStats{}, fmt.Errorf("reading the stats of session container %s: %w", shortID(b.containerID), err)
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return sandbox.BoxStats{}, fmt.Errorf("reading the stats of session container %s: %w", shortID(b.containerID), err)
	}
	nano := b.r.cfg.Box.NanoCPUs
	st := sandbox.BoxStats{At: s.Read, CPUs: int((nano + 1e9 - 1) / 1e9), MemoryLimitBytes: int64(s.MemoryStats.Limit)}
	if wall := s.Read.Sub(s.PreRead); wall > 0 && nano > 0 && !s.PreRead.IsZero() {
		used := float64(s.CPUStats.CPUUsage.TotalUsage) - float64(s.PreCPUStats.CPUUsage.TotalUsage)
		st.CPUPercent = min(100, max(0, 100*used/(float64(wall.Nanoseconds())*float64(nano)/1e9)))
	}
	// cgroup v1 counts the page cache in usage ("cache"); v2 names it "file".
	cache := s.MemoryStats.Stats["cache"]
	if c, ok := s.MemoryStats.Stats["file"]; ok {
		cache = c
	}
	st.MemoryCacheBytes = int64(cache)
	st.MemoryBytes = int64(s.MemoryStats.Usage - min(cache, s.MemoryStats.Usage))
	// As the session's user, not root: a template chose the image's df.
	var out bytes.Buffer
	uid := strconv.Itoa(b.r.cfg.UIDBlock.Session(b.uid))
	if err := b.exec(ctx, uid+":"+uid, []string{"df", "-P", "-B1", sandbox.SessionHome}, nil, &out); err != nil {
		return sandbox.BoxStats{}, fmt.Errorf("reading the size of the session's home: %w", err)
	}
	st.DiskLimitBytes, st.DiskBytes, err = parseDF(out.String())
	return st, err
}

// parseDF reads the size and the used bytes of df -P -B1's one file system.
func parseDF(out string) (size, used int64, err error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if f := strings.Fields(lines[len(lines)-1]); len(lines) == 2 && len(f) >= 3 {
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		used, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			return size, used, nil
		}
	}
	return 0, 0, fmt.Errorf("df printed %q, not a file system's size", out)
}
