// Package boxspec holds what every sandbox runtime (Docker, Kubernetes) shares about a box:
// the sandbox image's layout (users, paths), the capabilities its executor needs, the
// executor's command line, a session box's calls over its control line and its files as a tar
// stream. The runtimes differ in how they make a box; the box is the same.
package boxspec

import (
	"strconv"
	"strings"
)

// The sandbox image's users, in UIDBlocks blocks of UIDBlockSize uids from UIDBase: in a block,
// slot N runs as its first uid plus N (MaxSlots of them), session i after the slots
// (MaxSessions of them); InstallerUID installs dependencies into PackagesDir. The image's
// Dockerfile makes them (its build arguments carry these numbers).
const (
	UIDBase      = 10000
	MaxSlots     = 64
	MaxSessions  = 64
	UIDBlockSize = MaxSlots + MaxSessions
	UIDBlocks    = 32
	InstallerUID = 9999
)

// UIDBlock is which block of the image's uids a runtime's boxes run as (0 to UIDBlocks-1).
// Linux counts a uid's processes (RLIMIT_NPROC) across every container that shares the host's
// user namespace, Docker's and a Kubernetes node's alike, so two runtimes on one kernel (two
// daemons on one host, or a daemon beside a test cluster) that used the same uids would let a
// fork storm held at its cap in one box make forks fail in the other's: each takes a block of
// its own (the daemon's setting uid_block).
type UIDBlock int

// Slot is the uid slot n of b runs as.
func (b UIDBlock) Slot(n int) int { return UIDBase + int(b)*UIDBlockSize + n }

// Session is the uid session box i of b runs as.
func (b UIDBlock) Session(i int) int { return b.Slot(MaxSlots + i) }

// Paths in the sandbox image: the executor binary, the pid file the executor writes under
// its default run root (/sandbox), and where installed dependencies live.
const (
	ExecutorPath = "/opt/sandpit/sandpit-executor"
	// IdleArg is the executor's argument for its mode that waits until it is signalled (its
	// IdleMode, which the executor's binary cannot import from here): a Docker box's own
	// process.
	IdleArg         = "idle"
	ExecutorPIDFile = "/sandbox/executor.pid"
	PackagesDir     = "/opt/sandpit/packages"
)

// ProxyAddr is where the executor serves the egress proxy in a box of network "allowlist":
// the box's own loopback (each box has its own network namespace).
const ProxyAddr = "127.0.0.1:3128"

// Capabilities the executor needs (every other is dropped): switch to the slot uids, kill
// their processes, hand run directories to them and remove what they left.
var Capabilities = []string{"SETUID", "SETGID", "KILL", "CHOWN", "FOWNER", "DAC_OVERRIDE"}

// RunscMemoryReserve is, under runsc, the memory (bytes) added to a box's memory limit and
// kept free by its executor: gVisor has no memory cgroup inside the sandbox, so the host's
// out-of-memory killer would kill the whole sandbox, not the run. The executor stops a run as
// outcome memory_limit when less than this is available in the box. 128 MiB was too little
// (a fork storm in a box that had served the conformance suite).
const RunscMemoryReserve = 256 << 20

// SocketBufferMax is the most a TCP socket of a box may hold in its receive buffer, and in its
// send buffer (bytes): the host's maxima (often 32 MiB and 4 MiB) let a few unread loopback
// connections hold hundreds of MiB of kernel memory that a cgroup v1 memory limit does not
// count. 4 MiB still fills a fast link's window.
const SocketBufferMax = 4 << 20

// ForkServer configures the executor's fork server: a process in the box that has imported
// Preload and forks each run from itself, so runs skip the interpreter's start and those
// imports. Off, every run starts a fresh interpreter.
type ForkServer struct {
	Enabled bool
	// Preload are the modules it imports (those the image lacks are skipped).
	Preload []string
	// MaxRuns replaces it after that many runs; 0 never does.
	MaxRuns int
}

// Executor is how a box's executor is started.
type Executor struct {
	// UID is the uid its one slot runs as (UIDBlock.Slot or UIDBlock.Session).
	UID int
	// ForkServer starts runs as forks of a fork server that imported Preload, replaced after
	// ForkServerMaxRuns runs (0: never).
	ForkServer        bool
	Preload           []string
	ForkServerMaxRuns int
	// GVisor says the box runs under gVisor (runsc): the executor keeps RunscMemoryReserve
	// free and writes the socket buffer maxima itself.
	GVisor bool
	// EgressProxy makes the executor serve the egress proxy at ProxyAddr (network "allowlist").
	EgressProxy bool
	// SessionHome, when set, makes the executor a session's: its first call starts the
	// session's interpreter with that home.
	SessionHome string
}

// Command is the executor's command line: one slot, run as e.UID.
func (e Executor) Command() []string {
	cmd := []string{ExecutorPath, "serve", "-slots", "1", "-uid-base", strconv.Itoa(e.UID),
		"-fork-server=" + strconv.FormatBool(e.ForkServer), "-preload", strings.Join(e.Preload, ","),
		"-fork-server-max-runs", strconv.Itoa(e.ForkServerMaxRuns)}
	if e.GVisor {
		cmd = append(cmd, "-runtime", "runsc", "-memory-reserve", strconv.FormatInt(RunscMemoryReserve, 10),
			"-socket-buffer-max", strconv.FormatInt(SocketBufferMax, 10))
	}
	if e.EgressProxy {
		cmd = append(cmd, "-egress-proxy", ProxyAddr)
	}
	if e.SessionHome != "" {
		cmd = append(cmd, "-session-home", e.SessionHome)
	}
	return cmd
}
