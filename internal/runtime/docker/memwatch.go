package docker

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/client"
)

// RunscMemoryMargin is, under runsc, how close (bytes) the box's real memory on the host may
// come to its container's limit before the daemon stops the run as memory_limit. The
// executor's own watch reads gVisor's MemAvailable, which does not count what the sandbox's
// kernel holds for the run (its network stack's socket buffers above all); the host's cgroup
// does, and the engine kills the whole sandbox at the limit.
const RunscMemoryMargin = 64 << 20

// memWatchInterval is how often the daemon reads a runsc box's memory during a run.
const memWatchInterval = 20 * time.Millisecond

// boxMemory reads the memory a container uses on the host from its cgroup v1 memory
// directory dir: memory.usage_in_bytes without the file cache the kernel can reclaim
// (total_cache less total_shmem: gVisor's memory file is shared memory, and counts).
func boxMemory(dir string) (int64, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	var cache, shmem int64
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "total_cache":
			cache = n
		case "total_shmem":
			shmem = n
		}
	}
	return usage - max(cache-shmem, 0), nil
}

// watchMemory reads the box's memory (boxMemory of dir) every memWatchInterval until ctx
// ends, and calls over once, with what it read, when it reaches limit.
func watchMemory(ctx context.Context, dir string, limit int64, over func(used int64)) {
	tick := time.NewTicker(memWatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if used, err := boxMemory(dir); err == nil && used >= limit {
				over(used)
				return
			}
		}
	}
}

// runscWatch starts, for a run in container id under runsc on cgroup v1, the daemon's watch
// of the box's real memory (watchMemory, RunscMemoryMargin below the container's limit). It
// returns the run's context, cancelled when the box reaches it, a function that gives what it
// read then (0: it did not), and one that ends the watch. Where the box's cgroup cannot be
// read (cgroup v2, the engine on another host) it watches nothing.
func (r *Runtime) runscWatch(ctx context.Context, slot int, id string) (context.Context, func() int64, func()) {
	limit := addIfSet(r.cfg.Box.MemoryBytes, RunscMemoryReserve)
	if !r.cfg.Box.gVisor() || limit <= 0 || CgroupV2() || slot < 0 || slot >= len(r.cgroups) {
		return ctx, func() int64 { return 0 }, func() {}
	}
	dir, err := r.cgroups[slot].lookup(ctx, r.api, id)
	if err != nil {
		return ctx, func() int64 { return 0 }, func() {}
	}
	runCtx, cancel := context.WithCancel(ctx)
	var used atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchMemory(runCtx, dir, limit-RunscMemoryMargin, func(n int64) {
			used.Store(n)
			cancel()
		})
	}()
	return runCtx, used.Load, func() { cancel(); <-done }
}

// cgroupCache holds a slot's container's memory cgroup directory, looked up once per container.
type cgroupCache struct {
	mu      sync.Mutex
	of, dir string // the directory of container of
}

// lookup returns memoryCgroup of container id, from the cache when it holds id's.
func (c *cgroupCache) lookup(ctx context.Context, api client.APIClient, id string) (string, error) {
	c.mu.Lock()
	if c.of == id {
		dir := c.dir
		c.mu.Unlock()
		return dir, nil
	}
	c.mu.Unlock()
	dir, err := memoryCgroup(ctx, api, id)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.of, c.dir = id, dir
	c.mu.Unlock()
	return dir, nil
}
