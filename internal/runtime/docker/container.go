package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
)

// Labels on sandpit's containers and images.
const (
	labelManaged = "dev.sandpit.managed"
	labelDataDir = "dev.sandpit.data-dir"
	labelConfig  = "dev.sandpit.config"
	labelSlot    = "dev.sandpit.slot"
	labelSession = "dev.sandpit.session"
)

// Box is each slot's container: its limits and hardening. Every slot has its own container with
// these limits, so they are per slot.
type Box struct {
	// MemoryBytes is the container's memory limit; MemorySwapBytes its memory+swap limit
	// (equal to MemoryBytes means no swap).
	MemoryBytes, MemorySwapBytes int64
	// NanoCPUs is the CPU quota in billionths of a CPU (1e9 = one CPU).
	NanoCPUs int64
	// PidsLimit caps the container's processes and threads.
	PidsLimit int64
	// TmpBytes and RunDirBytes size the tmpfs mounts of /tmp and /sandbox (the run directories).
	TmpBytes, RunDirBytes int64
	// Network is "full" (the engine's default bridge), "none" (no network interface but lo) or
	// "allowlist" (no interface but lo either; the executor serves the egress proxy there, see
	// ProxyAddr).
	// Either way each container has its own network namespace: its own loopback and abstract
	// unix sockets.
	Network string
	// Runtime is the engine's OCI runtime for the container: "" or "runc" (the engine's
	// default), or "runsc" (gVisor), which must be registered with the engine.
	Runtime string
}

// RunscMemoryReserve is, under runsc, the memory (bytes) added to a slot's container limit and
// kept free by its executor: gVisor has no memory cgroup inside the sandbox, so the host's
// out-of-memory killer would kill the whole sandbox, not the run. The executor stops a run as
// outcome memory_limit when less than this is available in the box; the reserve covers the
// sandbox's own kernel (tens of MiB) and what a run can allocate between two of the executor's
// looks (every 20 ms). 128 MiB was too little: a fork storm in a box that had served the
// conformance suite (gVisor never frees the host threads and address spaces of earlier runs)
// had the engine kill the whole container for memory.
const RunscMemoryReserve = boxspec.RunscMemoryReserve

// RunscPidsFactor multiplies a slot's pids limit under runsc. There the limit counts no task of
// the code (gVisor keeps those in its own kernel, where the per-run RLIMIT_NPROC bounds them)
// but the sandbox's host threads: on the ptrace platform a host thread per task of the Sentry
// and per address space it serves, which gVisor never frees. Reaching the limit kills the
// whole sandbox, so the executor stops a run at its process cap (see executor.Config.GVisor)
// and the limit leaves room for the threads a stopped fork storm has already cost.
const RunscPidsFactor = 4

// gVisor reports whether the box's containers run under gVisor.
func (b Box) gVisor() bool { return b.Runtime == "runsc" }

// addIfSet adds extra to a limit, leaving 0 (no limit) and -1 (unlimited) alone.
func addIfSet(limit, extra int64) int64 {
	if limit <= 0 {
		return limit
	}
	return limit + extra
}

// tmpfsSize caps a tmpfs at bytes and at one inode per 4 KiB of them: the kernel's own inode
// cap is half the host's memory pages, and every empty file or directory costs memory that the
// container's cgroup is charged for, so without it a flood of empty directories exhausts the
// container's memory long before the tmpfs is "full".
func tmpfsSize(bytes int64) string {
	return "size=" + strconv.FormatInt(bytes, 10) + ",nr_inodes=" + strconv.FormatInt(max(bytes/4096, 1024), 10)
}

// capabilities the executor needs: switch to the slot uids, kill their processes, hand run
// directories to them and remove what they left.
var capabilities = boxspec.Capabilities

// SocketBufferMax is the most a TCP socket of a box may hold in its receive buffer, and in its
// send buffer (bytes): the host's maxima (often 32 MiB and 4 MiB) let a few unread loopback
// connections hold hundreds of MiB of kernel memory that a cgroup v1 memory limit does not
// count. 4 MiB still fills a fast link's window.
const SocketBufferMax = boxspec.SocketBufferMax

// socketSysctls bound each TCP socket's buffers in the box's own network namespace (the
// kernel keeps tcp_rmem and tcp_wmem per namespace). gVisor ignores them: there the executor
// writes the same maxima (its -socket-buffer-max).
var socketSysctls = map[string]string{
	"net.ipv4.tcp_rmem": "4096 131072 " + strconv.Itoa(SocketBufferMax),
	"net.ipv4.tcp_wmem": "4096 16384 " + strconv.Itoa(SocketBufferMax),
}

// spec is slot's container's whole configuration, derived from the image and the box.
func (b Box) spec(img Image, dataDir string, slot int) (*container.Config, *container.HostConfig, string) {
	network := container.NetworkMode("bridge")
	if b.Network == "none" || b.Network == "allowlist" {
		network = "none"
	}
	memory, memorySwap, pids := b.MemoryBytes, b.MemorySwapBytes, b.PidsLimit
	if b.gVisor() {
		// The reserve the executor keeps free (see RunscMemoryReserve) is on top, so runs have
		// the same memory as under runc; the pids limit counts gVisor's host threads (see
		// RunscPidsFactor).
		memory, memorySwap = addIfSet(memory, RunscMemoryReserve), addIfSet(memorySwap, RunscMemoryReserve)
		pids = addIfSet(pids, pids*(RunscPidsFactor-1))
	}
	host := &container.HostConfig{
		Resources: container.Resources{
			Memory:     memory,
			MemorySwap: memorySwap,
			NanoCPUs:   b.NanoCPUs,
			PidsLimit:  ptr(pids),
		},
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/tmp":     "rw,nosuid,nodev,mode=1777," + tmpfsSize(b.TmpBytes),
			"/sandbox": "rw,nosuid,nodev,mode=0711," + tmpfsSize(b.RunDirBytes),
		},
		Runtime:       b.Runtime,
		CapDrop:       []string{"ALL"},
		CapAdd:        capabilities,
		SecurityOpt:   []string{"no-new-privileges", seccompOption(b.Network)},
		Sysctls:       socketSysctls,
		Init:          ptr(true),
		LogConfig:     container.LogConfig{Type: "none"},
		NetworkMode:   network,
		RestartPolicy: container.RestartPolicy{Name: "no"},
		// The installed dependencies and pip's cache outlive the container (no host path).
		Mounts: []mount.Mount{{
			Type:   mount.TypeVolume,
			Source: VolumeName(dataDir),
			Target: PackagesDir,
			VolumeOptions: &mount.VolumeOptions{Labels: map[string]string{
				labelManaged: "1",
				labelDataDir: dataDir,
			}},
		}},
	}
	cfg := &container.Config{
		Image: img.Tag,
		// The container's own process, as root: sandpit's executor waiting, never a program
		// of the image (a template's steps may replace sleep, or set an entrypoint).
		Entrypoint: []string{boxspec.ExecutorPath},
		Cmd:        []string{boxspec.IdleArg},
		User:       "0",
		WorkingDir: "/sandbox",
		Labels: map[string]string{
			labelManaged: "1",
			labelDataDir: dataDir,
		},
	}
	// The config label is a hash of everything above, the same for every slot: a container made
	// with other settings is replaced, not adopted.
	raw, _ := json.Marshal(struct {
		C *container.Config
		H *container.HostConfig
	}{cfg, host})
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])[:16]
	cfg.Labels[labelConfig] = hash
	cfg.Labels[labelSlot] = strconv.Itoa(slot)
	return cfg, host, hash
}

// PackagesDir is where the package volume is mounted in the container.
const PackagesDir = boxspec.PackagesDir

// ExecutorPath is where the sandbox image has sandpit-executor; ExecutorPIDFile is where the
// executor, started by the runtime with its default run root (/sandbox), records its pid.
const (
	ExecutorPath    = boxspec.ExecutorPath
	ExecutorPIDFile = boxspec.ExecutorPIDFile
)

// VolumeName is the name of the data directory's package volume: installed dependencies and
// pip's cache, kept across container re-creation.
func VolumeName(dataDir string) string {
	return containerName(dataDir) + "-packages"
}

// containerName is the base of the containers' names for a data directory; slot N's container
// is named containerName(dataDir)-N.
func containerName(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return "sandpit-" + hex.EncodeToString(sum[:])[:12]
}

// ensureContainer adopts slot's running container when its configuration hash matches (and
// discard is false), and otherwise removes every container labelled for the data directory's
// slot and creates and starts a new one. It returns the container's ID and whether it was
// adopted.
func ensureContainer(ctx context.Context, api client.APIClient, log *slog.Logger, img Image, box Box, dataDir string, slot int, discard bool) (string, bool, error) {
	cfg, host, hash := box.spec(img, dataDir, slot)
	list, err := Containers(ctx, api, dataDir)
	if err != nil {
		return "", false, err
	}
	adopted := ""
	for _, c := range list {
		if c.Labels[labelSlot] != strconv.Itoa(slot) {
			continue
		}
		if adopted == "" && !discard && c.Labels[labelConfig] == hash && c.State == container.StateRunning {
			adopted = c.ID
			continue
		}
		log.Info("removing a sandpit container that is stopped, replaced or has other settings", "container", shortID(c.ID), "state", c.State)
		if err := removeContainer(ctx, api, c.ID); err != nil {
			return "", false, err
		}
	}
	if adopted != "" {
		return adopted, true, nil
	}
	id, err := createContainer(ctx, api, log, box, cfg, host, containerName(dataDir)+"-"+strconv.Itoa(slot))
	return id, false, err
}

// createContainer creates and starts a container named name with cfg and host (box says
// which runtime it asked for, to explain a failure), bounds its TCP buffers (limitTCPMemory),
// and returns its ID.
func createContainer(ctx context.Context, api client.APIClient, log *slog.Logger, box Box, cfg *container.Config, host *container.HostConfig, name string) (string, error) {
	created, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host, Name: name})
	if err != nil {
		if box.Runtime != "" && strings.Contains(err.Error(), "runtime") {
			return "", fmt.Errorf("creating the sandbox container with runtime %q: %w (is it installed and registered "+
				"in the engine's daemon.json under \"runtimes\"? `sandpit doctor` checks it)", box.Runtime, err)
		}
		return "", fmt.Errorf("creating the sandbox container: %w", err)
	}
	for _, w := range created.Warnings {
		log.Warn("engine warning creating the sandbox container", "warning", w)
	}
	if _, err := api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		_ = removeContainer(ctx, api, created.ID)
		return "", fmt.Errorf("starting the sandbox container: %w", err)
	}
	// Before the executor starts, so every socket in the box is counted.
	if err := limitTCPMemory(ctx, api, created.ID, box.gVisor(), TCPMemoryBytes); err != nil {
		log.Warn("the box's socket buffers are not bounded by its memory limit (cgroup v1 counts them only where sandpit can set "+
			"the container's memory.kmem.tcp.limit_in_bytes: run the daemon as root on the engine's host, or use cgroup v2)",
			"container", shortID(created.ID), "error", err)
	}
	return created.ID, nil
}

// removeContainer force-removes a container; one already gone is not an error.
func removeContainer(ctx context.Context, api client.APIClient, id string) error {
	if _, err := api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing container %s: %w", shortID(id), err)
	}
	return nil
}

// Containers lists the containers labelled for dataDir (running or not).
func Containers(ctx context.Context, api client.APIClient, dataDir string) ([]container.Summary, error) {
	list, err := api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelDataDir+"="+dataDir),
	})
	if err != nil {
		return nil, fmt.Errorf("listing sandpit containers: %w", err)
	}
	return list.Items, nil
}

// SlotOf returns the slot a container of Containers serves, and false for another (a session's).
func SlotOf(c container.Summary) (int, bool) {
	slot, err := strconv.Atoi(c.Labels[labelSlot])
	return slot, err == nil && c.Labels[labelSlot] != ""
}

// DataDirs lists the data directories that sandpit containers on this engine (running or not)
// belong to, each once.
func DataDirs(ctx context.Context, api client.APIClient) ([]string, error) {
	list, err := api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelManaged),
	})
	if err != nil {
		return nil, fmt.Errorf("listing sandpit containers: %w", err)
	}
	var dirs []string
	for _, c := range list.Items {
		if dir := c.Labels[labelDataDir]; dir != "" && !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// RemoveContainers force-removes every container labelled for dataDir and returns how many.
// The caller must own the data directory (no sandpit process may be using its containers).
func RemoveContainers(ctx context.Context, api client.APIClient, dataDir string) (int, error) {
	list, err := Containers(ctx, api, dataDir)
	if err != nil {
		return 0, err
	}
	for i, c := range list {
		if err := removeContainer(ctx, api, c.ID); err != nil {
			return i, err
		}
	}
	return len(list), nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
