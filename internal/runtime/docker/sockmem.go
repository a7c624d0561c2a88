package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
)

// TCPMemoryBytes is the kernel memory (bytes) that the TCP sockets of one box may hold for
// their buffers on cgroup v1, where the memory cgroup does not count socket buffers against
// the box's memory limit. Reaching it puts the box's sockets under memory pressure: their
// windows stop growing and what does not fit is dropped and sent again, as at the host's own
// tcp_mem limit, but for this box alone. 64 MiB carries a loopback or internet transfer at
// full speed (each socket's buffers are at most 4 MiB, see socketSysctls).
const TCPMemoryBytes = 64 << 20

// cgroupRoot is where the host's cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// ErrSocketMemoryUnbounded says that a box's socket buffers could not be bounded: the daemon
// does not run on the engine's host as root, or the host's cgroup v1 memory controller has no
// TCP accounting.
var ErrSocketMemoryUnbounded = errors.New("socket buffers unbounded")

// CgroupV2 reports whether this host runs the unified cgroup hierarchy (cgroup v2), whose
// memory controller charges socket buffers to the cgroup that owns the socket: the box's memory
// limit bounds them, and limitTCPMemory has nothing to do.
func CgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// limitTCPMemory turns on TCP buffer accounting for container id's memory cgroup (cgroup v1)
// and caps it at bytes (memory.kmem.tcp.limit_in_bytes): sockets created afterwards, every one
// a run or the executor creates, count against it. It finds the cgroup through the
// container's first process on this host, so it works where the daemon runs on the engine's
// host with the right to write the host's cgroups (root); elsewhere it returns an error
// wrapping ErrSocketMemoryUnbounded. On cgroup v2, and under gVisor (whose sockets are its own
// kernel's, in the sandbox's memory), it does nothing.
func limitTCPMemory(ctx context.Context, api client.APIClient, id string, gVisor bool, bytes int64) error {
	if gVisor || CgroupV2() {
		return nil
	}
	dir, err := memoryCgroup(ctx, api, id)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes")
	if err := os.WriteFile(file, []byte(strconv.FormatInt(bytes, 10)), 0); err != nil {
		return fmt.Errorf("%w: %w", ErrSocketMemoryUnbounded, err)
	}
	return nil
}

// TCPMemoryLimit reads the TCP buffer limit (bytes) of container id's memory cgroup on
// cgroup v1, and whether accounting is on (the kernel's "unlimited" is a page-rounded
// maximum, reported as on=false).
func TCPMemoryLimit(ctx context.Context, api client.APIClient, id string) (limit int64, on bool, err error) {
	dir, err := memoryCgroup(ctx, api, id)
	if err != nil {
		return 0, false, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes"))
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrSocketMemoryUnbounded, err)
	}
	limit, err = strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: reading the TCP limit: %w", ErrSocketMemoryUnbounded, err)
	}
	return limit, limit < 1<<62, nil
}

// memoryCgroup returns the directory of container id's cgroup v1 memory cgroup on this host,
// from /proc/PID/cgroup of its first process, checked to name the container (a daemon in
// another pid namespace, or talking to a remote engine, would read another process's).
func memoryCgroup(ctx context.Context, api client.APIClient, id string) (string, error) {
	ins, err := api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("%w: inspecting container %s: %w", ErrSocketMemoryUnbounded, shortID(id), err)
	}
	if ins.Container.State == nil || ins.Container.State.Pid <= 0 {
		return "", fmt.Errorf("%w: container %s is not running", ErrSocketMemoryUnbounded, shortID(id))
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", ins.Container.State.Pid))
	if err != nil {
		return "", fmt.Errorf("%w: the engine is not on this host, or its processes are out of sight: %w", ErrSocketMemoryUnbounded, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.Contains(","+parts[1]+",", ",memory,") {
			continue
		}
		if !strings.Contains(parts[2], id) {
			return "", fmt.Errorf("%w: process %d is not in container %s's cgroup (the engine runs in another pid namespace)",
				ErrSocketMemoryUnbounded, ins.Container.State.Pid, shortID(id))
		}
		return filepath.Join(cgroupRoot, "memory", parts[2]), nil
	}
	return "", fmt.Errorf("%w: no cgroup v1 memory controller for container %s", ErrSocketMemoryUnbounded, shortID(id))
}
