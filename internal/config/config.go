// Package config holds sandpit's one configuration struct, its defaults, how it is loaded
// (defaults < config file < environment < flags) and how it is checked.
//
// Every setting has one key, the snake_case name used in the JSON config file (for example
// "queue_length"), an environment variable SANDPIT_<KEY in upper case> (SANDPIT_QUEUE_LENGTH)
// and, through Set, a command-line flag. Environment variables and Set are derived from the
// struct's json tags, so a new field gets them for free.
//
// Value syntax, the same in the file (as JSON), the environment and Set:
//
//   - strings are taken as they are;
//   - whole numbers (counts, *_ms milliseconds) are decimal integers;
//   - sizes (every *_bytes key) are a whole number of bytes, or a whole number followed by
//     exactly one of the binary suffixes KiB (1024), MiB (1024²) or GiB (1024³), for example
//     512MiB or "1 GiB". Other suffixes (KB, M, GB, ...) and fractions are rejected. In the file
//     a size may be a JSON number (bytes) or a JSON string;
//   - cpus is a decimal number;
//   - packages is a JSON list of strings in the file and a comma-separated list in the
//     environment and Set, where an empty value means no packages.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// ExecutorName is the file name of the executor binary looked for next to the running
// binary when ExecutorPath is empty.
const ExecutorName = "sandpit-executor"

// Config is sandpit's whole configuration. The zero value is not useful: start from Default
// or Load, and call Validate before use.
type Config struct {
	// Listen is the TCP address the daemon's HTTP API listens on, as host:port.
	// Default "127.0.0.1:8765". An empty host (":8765") listens on every interface, which
	// lets anyone who can reach the machine run code.
	Listen string `json:"listen"`

	// AllowedHosts are the host names (without port) that the API answers besides localhost and
	// loopback addresses, checked against each request's Host and Origin headers to stop
	// DNS-rebinding and cross-site requests from web pages. "*" turns the check off. Default
	// none: list the names clients use when listen is not a loopback address.
	AllowedHosts []string `json:"allowed_hosts"`
	// Token, when set, is the bearer token every API request (REST and MCP, all but
	// GET /healthz) must carry: Authorization: Bearer <token>. Required when listen is not a
	// loopback address. Clients read it from SANDPIT_TOKEN. Default empty.
	Token string `json:"token"`
	// BodiesMaxBytes is the budget of request bodies the API reads and holds at once, in bytes:
	// a request is admitted by its Content-Length before its body is read, and one the budget
	// has no room for is answered 429 unread. Default 128 MiB; at least the largest body one
	// request may send (raised to it), at most 64 GiB.
	BodiesMaxBytes int64 `json:"bodies_max_bytes"`
	// ReadsMaxBytes is the budget of session file-read bytes the daemon holds at once, in
	// bytes: a read is admitted before it starts (for twice the most it may return) and holds
	// its bytes until its answer is written (a write without progress for a minute ends it);
	// one with no room within 2 seconds is answered 429. An agent holds at most a quarter of
	// it (at least 64 MiB).
	// Default 256 MiB; at least 64 MiB (two copies of the largest read; raised to it), at most
	// 64 GiB.
	ReadsMaxBytes int64 `json:"reads_max_bytes"`
	// MaxConnections is the most connections the listener holds at once; more wait in the
	// kernel's backlog until one closes. A few more (connlimit.HealthReserve) are kept for
	// GET /healthz alone. Long-lived streams (E2B's Connect streams, REST's process output)
	// take at most three quarters of it, an agent an eighth, a sandbox or session a
	// sixteenth. Default 512; 16 to 1,000,000.
	MaxConnections int64 `json:"max_connections"`
	// DataDir is the directory where sandpit keeps its state. It must be an absolute path.
	// Default $XDG_DATA_HOME/sandpit, or ~/.local/share/sandpit when XDG_DATA_HOME is unset.
	DataDir string `json:"data_dir"`
	// DatabaseURL, when set, keeps the ledger, code library, knowledge, jobs and runs' output
	// files in this PostgreSQL database instead of SQLite in the data directory, so that
	// several daemons share them: postgres://user:password@host:5432/database?sslmode=….
	// Default empty (SQLite). See docs/several-daemons.md.
	DatabaseURL string `json:"database_url"`
	// DaemonID names this daemon among those sharing database_url: recorded with the runs it
	// does and the job fires it claims, and named in errors about what only it holds. 1 to 64
	// letters, digits, '.', '_' or '-'. Default empty: an ID made once and kept in the data
	// directory (file daemon-id).
	DaemonID string `json:"daemon_id"`
	// DockerHost is the Docker daemon to use, as a URL such as unix:///var/run/docker.sock or
	// tcp://host:2376. Default empty: the Docker client's own environment (DOCKER_HOST, ...)
	// and defaults.
	DockerHost string `json:"docker_host"`
	// SecretsTrustCAFile names a PEM file of CA certificates the egress proxy trusts, beside
	// the host's trust store, when it verifies the host a secret is added for (a private CA;
	// tests). Default empty: the host's trust store alone.
	SecretsTrustCAFile string `json:"secrets_trust_ca_file"`
	// ExecutorPath is the path of the sandpit-executor binary copied into the box. Default
	// empty: a file named sandpit-executor next to the running binary (see Executor).
	ExecutorPath string `json:"executor_path"`
	// BaseImage is the Docker image the sandbox image is built from, with python3. Default ""
	// chooses when the engine is reached: RegistryBaseImage when the engine has it, else
	// OfflineBaseImage when it has that, else RegistryBaseImage (pulled).
	BaseImage string `json:"base_image"`
	// Packages are the pip requirement specifiers installed into the sandbox image.
	// Default ["pandas","numpy","matplotlib","scipy","requests","beautifulsoup4","Pillow"].
	// An explicit empty list means none.
	Packages []string `json:"packages"`
	// ImageRepository is the repository name of the sandbox image sandpit builds (its tag is
	// chosen by sandpit). Default "sandpit-sandbox".
	ImageRepository string `json:"image_repository"`

	// Slots is how many runs execute at once. Default 4; allowed 1 to 64.
	Slots int `json:"slots"`
	// QueueLength is how many requests may wait for a free slot before more are refused as
	// busy. Default 16; allowed 0 to 10000.
	QueueLength int `json:"queue_length"`
	// ExecutionsPerAgent caps one agent's executions in slots plus queued; more are refused as
	// busy, naming the agent. Default 0: max(1, slots-1) + queue_length/2 (11 with the
	// defaults), which leaves other agents at least a slot's place and half the queue. Allowed
	// 0 to slots + queue_length (that many: no cap).
	ExecutionsPerAgent int `json:"executions_per_agent"`
	// DefaultTimeoutMS is the wall-clock limit of a run that names none, in milliseconds.
	// Default 30000 (30 s); allowed 1 to MaxTimeoutMS.
	DefaultTimeoutMS int64 `json:"default_timeout_ms"`
	// MaxTimeoutMS is the largest wall-clock limit a request may ask for, in milliseconds.
	// Default 600000 (10 min); allowed 1 to 86400000 (24 h).
	MaxTimeoutMS int64 `json:"max_timeout_ms"`
	// GraceMS is how long past a run's timeout the daemon waits for the executor's report
	// before it gives the run up as a sandbox_error, in milliseconds. Default 3000; allowed
	// 100 to 600000.
	GraceMS int64 `json:"grace_ms"`
	// MaxCodeBytes caps a request's Python source, in bytes. Default 1 MiB; allowed 1 B to 1 GiB.
	MaxCodeBytes int64 `json:"max_code_bytes"`
	// MaxInputBytes caps a request's JSON input text, in bytes. Default 1 MiB; allowed 1 B to 1 GiB.
	MaxInputBytes int64 `json:"max_input_bytes"`

	// MemoryBytes is the memory limit of each slot's sandbox (its container, holding its fork
	// server and its run), in bytes. Default 512 MiB; at least 64 MiB.
	MemoryBytes int64 `json:"memory_bytes"`
	// MemorySwapBytes is the limit of a sandbox's memory plus swap, in bytes (Docker's
	// --memory-swap). Default 0, meaning the same as MemoryBytes: no swap. Otherwise at
	// least MemoryBytes.
	MemorySwapBytes int64 `json:"memory_swap_bytes"`
	// CPUs is how many CPUs' worth of time each slot's sandbox may use. Default 1.0; more than
	// 0, at most 64.
	CPUs float64 `json:"cpus"`
	// PidsLimit caps the processes and threads in each slot's sandbox. Default 512; at least 16.
	PidsLimit int64 `json:"pids_limit"`
	// UIDBlock is which block of the sandbox image's uids the sandboxes' code runs as (0 to 31,
	// default 0). Linux counts a uid's processes across every container on one kernel, so
	// daemons whose sandboxes share a host or a Kubernetes node each need a block of their own:
	// with one block, a fork storm held at its cap in one daemon's sandbox would make forks
	// fail in the other's (see boxspec.UIDBlock).
	UIDBlock int `json:"uid_block"`
	// TmpBytes is the size of each sandbox's /tmp tmpfs, in bytes. Default 128 MiB; at least
	// 1 MiB. tmpfs pages count against memory_bytes: with the run directories and /dev/shm
	// (64 MiB) the defaults stay well under the sandbox's memory, so files alone cannot
	// exhaust it.
	TmpBytes int64 `json:"tmp_bytes"`
	// RunDirBytes is the size of the tmpfs holding a sandbox's run directories, in bytes.
	// Default 128 MiB; at least 1 MiB.
	RunDirBytes int64 `json:"run_dir_bytes"`
	// Network is each sandbox's network access: "full" (the engine's bridge: the internet, the
	// LAN, the host), "none" (no network, no installs) or "allowlist" (no network interface
	// but loopback; an HTTP proxy in the box through which the daemon dials what
	// network_allow names, and the package index for installs). Default "allowlist" (with an
	// empty network_allow: installs reach the package index, runs reach nothing). Either way
	// every slot has its own network namespace (its own loopback).
	Network string `json:"network"`
	// NetworkAllow is what runs may reach with network "allowlist": host names ("example.com",
	// "*.example.com", with ":port" or without), IP addresses and CIDR blocks ("10.0.0.0/8").
	// Loopback, private, link-local, metadata and other special-purpose addresses are refused
	// unless a CIDR inside their block names them. Default empty: runs reach nothing (installs
	// still reach the package index). A request's network_allow may narrow it.
	NetworkAllow []string `json:"network_allow"`
	// EgressMaxConnections caps the connections a run (or install) may ask the proxy for,
	// allowed or refused. Default 256; 1 to 100000.
	EgressMaxConnections int `json:"egress_max_connections"`
	// EgressMaxBytesSent and EgressMaxBytesReceived cap the bytes a run's connections carry
	// each way, together. Default 256 MiB each; at least 1 KiB.
	EgressMaxBytesSent     int64 `json:"egress_max_bytes_sent"`
	EgressMaxBytesReceived int64 `json:"egress_max_bytes_received"`
	// EgressConnectionTimeoutMS caps each connection's lifetime, in milliseconds. Default
	// 300000 (5 minutes); 1000 to 86400000.
	EgressConnectionTimeoutMS int64 `json:"egress_connection_timeout_ms"`
	// Runtime is the container runtime of the sandboxes: "runc" (the engine's default),
	// "runsc" (gVisor: a user-space kernel between the code and the host's, registered with the
	// Docker engine as a runtime named runsc), or "kubernetes" (pods of a Kubernetes cluster,
	// configured by Kubernetes; docs/kubernetes.md). Default "runc".
	Runtime string `json:"runtime"`
	// Kubernetes configures the cluster, namespace, image and placement of the pods with
	// runtime "kubernetes" (see the Kubernetes type); ignored otherwise.
	Kubernetes Kubernetes `json:"kubernetes"`

	// ForkServer keeps a fork server in the box: a Python process that has imported Preload
	// and forks each run from itself, so a run skips the interpreter's start (about 20 ms)
	// and those imports (pandas: about 0.7 s). Its memory (about 136 MiB resident with the
	// default preload) counts against memory_bytes. A run starts cold instead when one of its
	// installed dependencies holds a module the server imported or looked for. Default true.
	ForkServer bool `json:"fork_server"`
	// Preload are the modules the fork server imports, as Python dotted names; those the
	// image lacks (or that fail to import) are skipped, each with a line in the executor's log.
	// Default ["numpy","pandas","matplotlib.pyplot","matplotlib.backends.backend_agg",
	// "scipy.stats","scipy.optimize","requests","bs4","PIL.Image"]; at most 64.
	Preload []string `json:"preload"`
	// ForkServerMaxRuns replaces the fork server (in the background) after that many runs.
	// Default 1000; 0 never replaces it; at most 1000000000.
	ForkServerMaxRuns int `json:"fork_server_max_runs"`

	// RunMemoryBytes caps each run's data segment (heap), in bytes, beyond the data of the
	// fork server's preload (when it is on), which every run is allowed on top. Default 0,
	// meaning MemoryBytes. Otherwise 16 MiB to MemoryBytes.
	RunMemoryBytes int64 `json:"run_memory_bytes"`
	// StdoutBytes caps what a run may write to stdout, in bytes. Default 1 MiB; at least 1.
	StdoutBytes int64 `json:"stdout_bytes"`
	// StderrBytes caps what a run may write to stderr, in bytes. Default 1 MiB; at least 1.
	StderrBytes int64 `json:"stderr_bytes"`
	// OutputBytes caps the JSON text of a run's OUTPUT, in bytes. Default 1 MiB; at least 1.
	OutputBytes int64 `json:"output_bytes"`
	// FileSizeBytes caps any single file a run writes, in bytes. Default 64 MiB; 0 means no limit.
	FileSizeBytes int64 `json:"file_size_bytes"`
	// OpenFiles caps each process's open file descriptors. Default 256; 0 means no limit,
	// otherwise 16 to 1048576.
	OpenFiles int64 `json:"open_files"`
	// Processes caps the processes and threads of one run. Default 64; 0 means no limit
	// (PidsLimit still applies).
	Processes int64 `json:"processes"`

	// MaxInputFiles caps the input files of one request. Default 64; allowed 0 to 10000.
	MaxInputFiles int `json:"max_input_files"`
	// MaxInputFileBytes caps each input file, in bytes. Default 8 MiB; allowed 0 to
	// max_input_files_bytes.
	MaxInputFileBytes int64 `json:"max_input_file_bytes"`
	// MaxInputFilesBytes caps a request's input files together, in bytes. Default 16 MiB;
	// allowed 0 to 32 MiB (they travel to the box in one frame of at most 64 MiB, in base64).
	// The request body limit grows by 4/3 of it.
	MaxInputFilesBytes int64 `json:"max_input_files_bytes"`
	// OutputFiles caps how many output files a run returns (files it created or changed
	// under its working directory, and charts). Default 64; 0 collects none; at most 10000.
	OutputFiles int `json:"output_files"`
	// OutputFileBytes caps each output file, in bytes; a larger one is skipped and named in
	// the result. Default 8 MiB; allowed 0 to 32 MiB.
	OutputFileBytes int64 `json:"output_file_bytes"`
	// OutputFilesBytes caps a run's output files together, in bytes. Default 16 MiB; allowed
	// output_file_bytes to files_max_bytes.
	OutputFilesBytes int64 `json:"output_files_bytes"`
	// Charts saves open matplotlib figures (at each plt.show() and at the end of a run) and
	// PIL images shown as PNG output files (figure-1.png, image-1.png, …), unless a request
	// says otherwise. Default true.
	Charts bool `json:"charts"`
	// Notebook returns the value of a run's last expression and what it displays as results,
	// and lets code use IPython's % and ! syntax (docs/notebook.md). false runs code as a
	// plain script. Default true.
	Notebook bool `json:"notebook"`
	// FilesMaxBytes is the quota of all runs' kept output files together, in bytes (in the
	// data directory's files/). Storing a file over it evicts the files of the oldest
	// executions first; fetching an evicted file answers 410. Default 2 GiB; at least
	// output_files_bytes, at most 1 TiB.
	FilesMaxBytes int64 `json:"files_max_bytes"`

	// SessionIdleTimeoutMS ends a stateful session after that long without a call, unless
	// its creation asks otherwise. Default 600000 (10 minutes); 1000 to
	// session_max_lifetime_ms.
	SessionIdleTimeoutMS int64 `json:"session_idle_timeout_ms"`
	// SessionMaxLifetimeMS ends a session that long after its creation, and is the most a
	// session may ask for either limit. Default 3600000 (1 hour); 1000 to 86400000.
	SessionMaxLifetimeMS int64 `json:"session_max_lifetime_ms"`
	// SessionsPerAgent caps an agent's active sessions. Default 8; 1 to sessions_max.
	SessionsPerAgent int `json:"sessions_per_agent"`
	// SessionsMax caps the active sessions of all agents; each holds a container of its own
	// with memory_bytes of memory. Default 16; 0 turns sessions off; at most 64.
	SessionsMax int `json:"sessions_max"`
	// WarmSessions is how many session containers the Docker runtime (runtime docker or
	// runsc) keeps created, started and unclaimed, so that a session's creation, resume from
	// hibernation or fork claims one instead of waiting for a container's start; the pool
	// makes another in the background. At most sessions_max are kept; a one-off command keeps
	// none. Default 1; 0 to 64 (0 turns the pool off). The kubernetes runtime reads
	// kubernetes.warm_sessions instead.
	WarmSessions int `json:"warm_sessions"`
	// E2BTemplates are the templateIDs the E2B-compatible API (under /e2b, docs/e2b.md)
	// creates sandboxes from; each is the sandbox image. Default base and code-interpreter-v1.
	E2BTemplates []string `json:"e2b_templates"`
	// E2BPool is how many warm sessions (their interpreter started, the preload imported) are
	// kept ready for every door's creation (REST, MCP, the CLI, E2B sandboxes), so that a new
	// session answers at once. Each holds a container and counts against sessions_max. The
	// name is the E2B API's, where the pool began. Default 1; 0 (no pool) to
	// sessions_per_agent, below sessions_max.
	E2BPool int `json:"e2b_pool"`
	// SessionPoolMax is the most warm sessions the pool keeps while creations come faster
	// than it refills: each creation that finds it empty raises its target by one, and two
	// minutes without one lower it by one, back to e2b_pool. Held within sessions_per_agent
	// and below sessions_max; past e2b_pool only while the host has twice memory_bytes
	// available. Default 8; 0 to 64 (at most e2b_pool: a pool of fixed size).
	SessionPoolMax int `json:"session_pool_max"`
	// TemplatePools keeps warm sessions of templates ready (docs/templates.md): each key is
	// OWNER/NAME (the agent that built the template and its name), each value how many warm
	// sessions of it, its start command run and its interpreter started, wait for a creation
	// naming it. Each holds a container and counts against sessions_max. Default none (a
	// template's session starts cold); each 1 to sessions_per_agent, all of them with
	// e2b_pool below sessions_max.
	TemplatePools map[string]int `json:"template_pools"`

	// TemplateBuildTimeoutMS caps one template build (docs/templates.md), in milliseconds.
	// Default 1800000 (30 minutes: a cold build of a small template took 10 on a loaded
	// machine whose engine stores images on fuse-overlayfs); 10000 to 7200000.
	TemplateBuildTimeoutMS int64 `json:"template_build_timeout_ms"`
	// TemplateMaxBytes caps a template's sandbox image, in bytes: a bigger one fails its build
	// and is removed. Default 8 GiB; 64 MiB to 1 TiB.
	TemplateMaxBytes int64 `json:"template_max_bytes"`
	// TemplatesPerAgent caps the templates one agent keeps. Default 20; 0 (no templates) to
	// 1000.
	TemplatesPerAgent int `json:"templates_per_agent"`
	// TemplateVersionsKept is how many versions of a template before its current one are kept,
	// startable as NAME:VERSION (docs/templates.md); older ones are removed with their images
	// when a new one is built, unless a tag names them. Default 2; 0 to 100.
	TemplateVersionsKept int `json:"template_versions_kept"`
	// TemplateAptHosts are the Debian package sources' host names (network_allow's forms) a
	// template build may reach, at ports 80 and 443 unless an entry names its own, resolved
	// as the host resolves them (its /etc/hosts included) and allowed on whatever address
	// they resolve to, as the package index is.
	// Default deb.debian.org and security.debian.org.
	TemplateAptHosts []string `json:"template_apt_hosts"`
	// TemplateBuildAllow is what else a template build may reach (network_allow's forms: a
	// host, *.domain, an address or block, each with an optional port), beyond the package
	// sources (template_apt_hosts and the package index). Default none.
	TemplateBuildAllow []string `json:"template_build_allow"`

	// PortConnectionsPerSession caps the requests in flight to one session's ports (a
	// WebSocket counts until it closes); past it a request answers 429. Default 32; 1 to
	// 4096.
	PortConnectionsPerSession int `json:"port_connections_per_session"`
	// PortConnectionsPerAgent caps them for all of one agent's sessions. Default 64; 1 to
	// 16384.
	PortConnectionsPerAgent int `json:"port_connections_per_agent"`
	// PortIdleTimeoutMS ends a connection to a session's port after that long without a byte
	// either way, and answers 504 to a request whose server sends no answer that long.
	// Default 300000 (5 minutes); 1000 to 86400000.
	PortIdleTimeoutMS int64 `json:"port_idle_timeout_ms"`
	// PortConnectionMaxBytes caps the bytes one connection to a session's port carries,
	// both ways together; past it the connection is cut. Default 1 GiB; 1 MiB to 1 TiB.
	PortConnectionMaxBytes int64 `json:"port_connection_max_bytes"`
	// PublicHost is the host (and port) under which a session's port has a host name of its
	// own, {port}-{session}.{public_host}, a separate origin for browsers; E2B's get_host
	// composes it from the sandbox's domain. Default "": localhost and the listen port when
	// the daemon listens on loopback (browsers resolve *.localhost to it), else none.
	PublicHost string `json:"public_host"`

	// SessionAutoPause pauses a session at its idle timeout instead of ending it, unless its
	// creation asks otherwise (auto_pause). Default false.
	SessionAutoPause bool `json:"session_auto_pause"`
	// SessionHibernateAfterMS hibernates a session paused that long. Default 600000 (10
	// minutes); 0: never by time; at most 7 days.
	SessionHibernateAfterMS int64 `json:"session_hibernate_after_ms"`
	// SessionHibernateOnStop hibernates every session that takes no call when the daemon
	// stops, instead of ending it (daemon_stopped). Default true.
	SessionHibernateOnStop bool `json:"session_hibernate_on_stop"`
	// SessionsPausedMaxBytes bounds the memory of all paused sessions, each counted at its
	// container's memory_bytes. Default 2 GiB; 0 refuses every pause.
	SessionsPausedMaxBytes int64 `json:"sessions_paused_max_bytes"`
	// HibernatedPerAgent caps an agent's hibernated sessions. Default 4; 0 to 1000.
	HibernatedPerAgent int `json:"hibernated_per_agent"`
	// HibernatedMaxBytes bounds the bytes of all hibernation files (in the data directory's
	// hibernated/). Default 10 GiB; 0 refuses every hibernation.
	HibernatedMaxBytes int64 `json:"hibernated_max_bytes"`
	// HibernatedMaxAgeHours ends a session hibernated that long (hibernation_expired), its
	// files removed. Default 168 (7 days); 0: no age limit.
	HibernatedMaxAgeHours int64 `json:"hibernated_max_age_hours"`

	// IndexURL is the package index pip installs dependencies from (PEP 503 simple API), such
	// as a mirror: https://pypi.example.com/simple. Default empty: pip's own (PyPI). pip runs
	// inside the sandbox's container, so a loopback address (127.0.0.1, localhost, ::1) would
	// be the container itself and is refused: an index on this machine is reached as
	// host.docker.internal or the Docker bridge's gateway. A plain-HTTP index must be in
	// TrustedHosts (pip ignores it otherwise).
	IndexURL string `json:"index_url"`
	// ExtraIndexURLs are more indexes pip searches. Default none.
	ExtraIndexURLs []string `json:"extra_index_urls"`
	// TrustedHosts are index hosts pip may reach over plain HTTP or without a valid
	// certificate. Default none.
	TrustedHosts []string `json:"trusted_hosts"`
	// BinaryOnly makes pip install wheels only, never build a source distribution. Default false.
	BinaryOnly bool `json:"binary_only"`
	// InstallTimeoutMS bounds each dependency's install, in milliseconds. Default 120000;
	// allowed 1000 to 3600000.
	InstallTimeoutMS int64 `json:"install_timeout_ms"`
	// MaxDependencies caps the dependencies of one request or saved code. Default 50; allowed
	// 1 to 500.
	MaxDependencies int `json:"max_dependencies"`

	// CallbackURL, when set, sends sandboxed code's agent.* calls to the host application at this
	// http(s) URL (a webhook) instead of the built-in knowledge store. Default empty.
	CallbackURL string `json:"callback_url"`
	// CallbackSecret is the HMAC-SHA256 key that signs each webhook request (header
	// X-Sandpit-Signature). Required with callback_url.
	CallbackSecret string `json:"callback_secret"`
	// MaxCalls caps the agent.* calls of one run. Default 1000; allowed 0 to 1000000.
	MaxCalls int `json:"max_calls"`
	// MaxCallBytes caps one call's arguments and one answer, in bytes. Default 4 MiB; allowed
	// 1 KiB to 32 MiB (a call travels in one frame of the control line, at most 64 MiB).
	MaxCallBytes int64 `json:"max_call_bytes"`
	// CallTimeoutMS bounds how long the host may take to answer one call, in milliseconds.
	// Default 10000; allowed 100 to 600000.
	CallTimeoutMS int64 `json:"call_timeout_ms"`

	// ResultsMaxBytes is each agent's quota for stored results (agent.store_result, and POSTs to
	// /v1/agents/{agent}/results): the bytes of the keys and JSON values of all its versions
	// together. Default 64 MiB; allowed 1 KiB to 1 TiB.
	ResultsMaxBytes int64 `json:"results_max_bytes"`
	// ResultsMaxVersions caps the versions one result key of one agent may have. Default 100;
	// allowed 1 to 1000000.
	ResultsMaxVersions int64 `json:"results_max_versions"`
	// JobsPerAgent is the most jobs one agent may have (default 50; 1 to 100000), JobsMax the
	// most in all (default 500; 1 to 1000000): each job fires code on the daemon's slots.
	JobsPerAgent int64 `json:"jobs_per_agent"`
	JobsMax      int64 `json:"jobs_max"`
	// JobFilesMaxBytes is the most bytes the input files of all jobs together may hold (read
	// for every fire). Default 256 MiB; allowed 0 (no limit) to 64 GiB.
	JobFilesMaxBytes int64 `json:"job_files_max_bytes"`

	// LedgerMaxAgeDays is how many days the ledger keeps an execution's record. Default 30;
	// 0 keeps records regardless of age; at most 36500.
	LedgerMaxAgeDays int64 `json:"ledger_max_age_days"`
	// LedgerMaxExecutions is how many of the newest execution records the ledger keeps.
	// Default 100000; 0 keeps any number; at most 100000000.
	LedgerMaxExecutions int64 `json:"ledger_max_executions"`
	// LedgerMaxBytes is how many bytes the ledger's records may take together, with their
	// kept output files: past it the oldest records are pruned (see store.Retention). Default
	// 2 GiB; 0 keeps any number of bytes; else 64 MiB to 64 TiB.
	LedgerMaxBytes int64 `json:"ledger_max_bytes"`

	// LogLevel is the least severe level logged: "debug", "info", "warn" or "error".
	// Default "info".
	LogLevel string `json:"log_level"`
	// LogFormat is the log format: "text" or "json". Default "text".
	LogFormat string `json:"log_format"`
}

// The range of ledger_max_bytes besides 0.
const (
	minLedgerBytes = 64 * mib
	maxLedgerBytes = 64 << 40
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// DefaultPackages returns the packages installed when the configuration names none.
func DefaultPackages() []string {
	return []string{"pandas", "numpy", "matplotlib", "scipy", "requests", "beautifulsoup4", "Pillow", "ipython"}
}

// DefaultPreload returns the modules the fork server imports when the configuration names none:
// the default packages' modules agents import, pyplot with its Agg backend (the sandbox's
// MPLBACKEND; pyplot imports it only at the first figure, which cost every forked run that
// draws about a quarter of its time), and IPython, whose shell the fork server then makes once
// for the notebook layer (values and displays). A module the image lacks is skipped, with a
// line in the executor's log.
func DefaultPreload() []string {
	return []string{"numpy", "pandas", "matplotlib.pyplot", "matplotlib.backends.backend_agg", "scipy.stats", "scipy.optimize",
		"requests", "bs4", "PIL.Image", "IPython"}
}

// Default returns the defaults. DataDir is resolved from the process environment
// (XDG_DATA_HOME, HOME); it is empty when neither is set.
func Default() Config { return defaults(os.LookupEnv) }

func defaults(lookup func(string) (string, bool)) Config {
	sb := engine.DefaultConfig()
	return Config{
		Listen:          "127.0.0.1:8765",
		AllowedHosts:    []string{},
		DataDir:         defaultDataDir(lookup),
		BaseImage:       "",
		Packages:        DefaultPackages(),
		ImageRepository: "sandpit-sandbox",

		Slots:            sb.Slots,
		QueueLength:      sb.QueueLength,
		DefaultTimeoutMS: sb.DefaultTimeout.Milliseconds(),
		MaxTimeoutMS:     sb.MaxTimeout.Milliseconds(),
		GraceMS:          sb.Grace.Milliseconds(),
		MaxCodeBytes:     int64(sb.MaxCodeBytes),
		MaxInputBytes:    int64(sb.MaxInputBytes),

		MemoryBytes: 512 * mib,
		CPUs:        1.0,
		PidsLimit:   512,
		TmpBytes:    128 * mib,
		RunDirBytes: 128 * mib,
		Network:     "allowlist",
		Runtime:     "runc",
		Kubernetes:  DefaultKubernetes(),

		NetworkAllow:              []string{},
		EgressMaxConnections:      256,
		EgressMaxBytesSent:        256 * mib,
		EgressMaxBytesReceived:    256 * mib,
		EgressConnectionTimeoutMS: 300_000,

		ForkServer:        true,
		Preload:           DefaultPreload(),
		ForkServerMaxRuns: 1000,

		StdoutBytes:   sb.Limits.StdoutBytes,
		StderrBytes:   sb.Limits.StderrBytes,
		OutputBytes:   sb.Limits.OutputBytes,
		FileSizeBytes: sb.Limits.FileSizeBytes,
		OpenFiles:     sb.Limits.OpenFiles,
		Processes:     sb.Limits.Processes,

		MaxInputFiles:      sb.MaxInputFiles,
		MaxInputFileBytes:  sb.MaxInputFileBytes,
		MaxInputFilesBytes: sb.MaxInputFilesBytes,
		OutputFiles:        sb.Limits.OutputFiles,
		OutputFileBytes:    sb.Limits.OutputFileBytes,
		OutputFilesBytes:   sb.Limits.OutputFilesBytes,
		Charts:             sb.Charts,
		Notebook:           sb.Notebook,
		FilesMaxBytes:      store.DefaultFilesMaxBytes,
		BodiesMaxBytes:     128 << 20,
		ReadsMaxBytes:      session.DefaultReadsMaxBytes,
		MaxConnections:     512,

		SessionIdleTimeoutMS:      session.DefaultConfig().IdleTimeout.Milliseconds(),
		SessionMaxLifetimeMS:      session.DefaultConfig().MaxLifetime.Milliseconds(),
		SessionsPerAgent:          session.DefaultConfig().MaxPerAgent,
		SessionsMax:               session.DefaultConfig().MaxTotal,
		SessionHibernateAfterMS:   600_000,
		SessionHibernateOnStop:    true,
		SessionsPausedMaxBytes:    2 * gib,
		HibernatedPerAgent:        4,
		HibernatedMaxBytes:        10 * gib,
		HibernatedMaxAgeHours:     168,
		E2BTemplates:              []string{"base", "code-interpreter-v1"},
		E2BPool:                   1,
		SessionPoolMax:            8,
		TemplateBuildTimeoutMS:    1_800_000,
		TemplateMaxBytes:          8 * gib,
		TemplatesPerAgent:         20,
		TemplateVersionsKept:      2,
		TemplateAptHosts:          []string{"deb.debian.org", "security.debian.org"},
		TemplateBuildAllow:        []string{},
		PortConnectionsPerSession: ports.DefaultLimits().PerSession,
		PortConnectionsPerAgent:   ports.DefaultLimits().PerAgent,
		PortIdleTimeoutMS:         ports.DefaultLimits().IdleTimeout.Milliseconds(),
		PortConnectionMaxBytes:    ports.DefaultLimits().MaxBytes,
		WarmSessions:              1,

		ExtraIndexURLs:   []string{},
		TrustedHosts:     []string{},
		InstallTimeoutMS: sb.InstallTimeout.Milliseconds(),
		MaxDependencies:  sb.MaxDependencies,

		MaxCalls:      sb.MaxCalls,
		MaxCallBytes:  int64(sb.MaxCallBytes),
		CallTimeoutMS: sb.CallTimeout.Milliseconds(),

		ResultsMaxBytes:    store.DefaultQuotas().ResultsMaxBytes,
		ResultsMaxVersions: int64(store.DefaultQuotas().ResultsMaxVersions),
		JobsPerAgent:       int64(store.DefaultQuotas().JobsPerAgent),
		JobsMax:            int64(store.DefaultQuotas().JobsMax),
		JobFilesMaxBytes:   store.DefaultQuotas().JobFilesMaxBytes,

		LedgerMaxAgeDays:    30,
		LedgerMaxExecutions: 100_000,
		LedgerMaxBytes:      2 * gib,

		LogLevel:  "info",
		LogFormat: "text",
	}
}

// xdgDir returns $name, or home/fallback when $name is unset, empty or relative (the XDG
// base directory spec says relative values are to be ignored); "" when neither is known.
func xdgDir(lookup func(string) (string, bool), name, fallback string) string {
	if d, ok := lookup(name); ok && filepath.IsAbs(d) {
		return d
	}
	if home, ok := lookup("HOME"); ok && home != "" {
		return filepath.Join(home, fallback)
	}
	return ""
}

func defaultDataDir(lookup func(string) (string, bool)) string {
	if d := xdgDir(lookup, "XDG_DATA_HOME", filepath.Join(".local", "share")); d != "" {
		return filepath.Join(d, "sandpit")
	}
	return ""
}

// Sandbox returns the execution service's configuration: the *_ms fields become durations
// and Limits.MemoryBytes is RunMemoryBytes, or MemoryBytes when that is 0.
func (c Config) Sandbox() engine.Config {
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return engine.Config{
		Slots:              c.Slots,
		QueueLength:        c.QueueLength,
		ExecutionsPerAgent: c.executionsPerAgent(),
		DefaultTimeout:     ms(c.DefaultTimeoutMS),
		MaxTimeout:         ms(c.MaxTimeoutMS),
		Grace:              ms(c.GraceMS),
		MaxCodeBytes:       int(c.MaxCodeBytes),
		MaxInputBytes:      int(c.MaxInputBytes),
		Network:            c.Network,
		MaxDependencies:    c.MaxDependencies,
		InstallTimeout:     ms(c.InstallTimeoutMS),
		MaxCalls:           c.MaxCalls,
		MaxCallBytes:       int(c.MaxCallBytes),
		CallTimeout:        ms(c.CallTimeoutMS),

		MaxInputFiles:      c.MaxInputFiles,
		MaxInputFileBytes:  c.MaxInputFileBytes,
		MaxInputFilesBytes: c.MaxInputFilesBytes,
		Charts:             c.Charts,
		Notebook:           c.Notebook,
		Limits: sandbox.Limits{
			MemoryBytes:      c.RunMemory(),
			StdoutBytes:      c.StdoutBytes,
			StderrBytes:      c.StderrBytes,
			OutputBytes:      c.OutputBytes,
			FileSizeBytes:    c.FileSizeBytes,
			OpenFiles:        c.OpenFiles,
			Processes:        c.Processes,
			OutputFiles:      c.OutputFiles,
			OutputFileBytes:  c.OutputFileBytes,
			OutputFilesBytes: c.OutputFilesBytes,
		},
	}
}

// Egress returns the egress policy's configuration: for network "allowlist", network_allow,
// the package index's URLs and the egress_* caps; for template builds, the package sources
// and template_build_allow; for both, the endpoints the daemon itself uses,
// which no entry opens: its listen address, its Docker engine (docker_host, else the
// environment's DOCKER_HOST) and its database (database_url).
func (c Config) Egress() egress.Config {
	return egress.Config{
		Reserved:     egress.ReserveDaemon(c.Listen, cmp.Or(c.DockerHost, os.Getenv("DOCKER_HOST")), c.DatabaseURL),
		Allow:        c.NetworkAllow,
		IndexURLs:    append([]string{c.IndexURL}, c.ExtraIndexURLs...),
		PackageHosts: c.TemplateAptHosts,
		BuildAllow:   c.TemplateBuildAllow,
		Limits: egress.Limits{
			MaxConnections:    c.EgressMaxConnections,
			MaxBytesSent:      c.EgressMaxBytesSent,
			MaxBytesReceived:  c.EgressMaxBytesReceived,
			ConnectionTimeout: time.Duration(c.EgressConnectionTimeoutMS) * time.Millisecond,
			DialTimeout:       10 * time.Second,
		},
	}
}

// maxFileFrameBytes caps what one file setting may make the daemon and the box send each
// other in one frame (protocol.MaxFrame is 64 MiB; base64 makes 4/3 of the bytes).
const maxFileFrameBytes = 32 * mib

// validateFiles checks the settings of runs' files: input files, output files, their quota.
// bad reports one problem (see Validate).
func (c Config) validateFiles(bad func(key, format string, args ...any)) {
	count := func(key string, v int) {
		if v < 0 || v > 10_000 {
			bad(key, "is %d; allowed range is 0 to 10000 files", v)
		}
	}
	size := func(key string, v, hi int64, hiKey string) {
		if v < 0 || v > hi {
			bad(key, "is %s; allowed range is 0 to %s (%s)", FormatSize(v), FormatSize(hi), hiKey)
		}
	}
	count("max_input_files", c.MaxInputFiles)
	size("max_input_files_bytes", c.MaxInputFilesBytes, maxFileFrameBytes, "the files travel to the box in one frame")
	size("max_input_file_bytes", c.MaxInputFileBytes, c.MaxInputFilesBytes, "max_input_files_bytes")
	count("output_files", c.OutputFiles)
	size("output_file_bytes", c.OutputFileBytes, maxFileFrameBytes, "each file travels from the box in one frame")
	if c.OutputFilesBytes < c.OutputFileBytes {
		bad("output_files_bytes", "is %s, less than output_file_bytes (%s); give at least output_file_bytes",
			FormatSize(c.OutputFilesBytes), FormatSize(c.OutputFileBytes))
	}
	if c.FilesMaxBytes < c.OutputFilesBytes || c.FilesMaxBytes > 1<<40 {
		bad("files_max_bytes", "is %s; allowed range is output_files_bytes (%s) to 1TiB: the quota must hold at least one run's files",
			FormatSize(c.FilesMaxBytes), FormatSize(c.OutputFilesBytes))
	}
}

// Quotas returns the quotas on what each agent may store.
func (c Config) Quotas() store.Quotas {
	return store.Quotas{ResultsMaxBytes: c.ResultsMaxBytes, ResultsMaxVersions: int(c.ResultsMaxVersions),
		JobsPerAgent: int(c.JobsPerAgent), JobsMax: int(c.JobsMax), JobFilesMaxBytes: c.JobFilesMaxBytes}
}

// Retention returns the ledger's retention policy.
func (c Config) Retention() store.Retention {
	return store.Retention{MaxAge: time.Duration(c.LedgerMaxAgeDays) * 24 * time.Hour, MaxCount: int(c.LedgerMaxExecutions),
		MaxBytes: c.LedgerMaxBytes}
}

// RunMemory returns the per-run memory cap in bytes: RunMemoryBytes, or MemoryBytes when 0.
func (c Config) RunMemory() int64 {
	if c.RunMemoryBytes == 0 {
		return c.MemoryBytes
	}
	return c.RunMemoryBytes
}

// MemorySwap returns the box's memory-plus-swap limit in bytes as Docker takes it:
// MemorySwapBytes, or MemoryBytes (no swap) when 0.
func (c Config) MemorySwap() int64 {
	if c.MemorySwapBytes == 0 {
		return c.MemoryBytes
	}
	return c.MemorySwapBytes
}

// NanoCPUs returns CPUs in units of 10⁻⁹ CPUs, as Docker's HostConfig.NanoCPUs takes it.
func (c Config) NanoCPUs() int64 { return int64(math.Round(c.CPUs * 1e9)) }

// ContainerRuntime is the OCI runtime to ask the Docker engine for: "" for runc, the engine's
// default (whatever it is called there), else Runtime.
func (c Config) ContainerRuntime() string {
	if c.Runtime == "runc" || c.Runtime == RuntimeKubernetes {
		return ""
	}
	return c.Runtime
}

// Executor returns the executor binary's path: ExecutorPath, or a file named ExecutorName
// in the directory of the running binary (after resolving symlinks). It does not check that
// the file exists.
func (c Config) Executor() (string, error) {
	if c.ExecutorPath != "" {
		return c.ExecutorPath, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the executor next to the sandpit binary: %w (set executor_path)", err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Join(filepath.Dir(exe), ExecutorName), nil
}

// SlogLevel returns LogLevel as a slog.Level (slog.LevelInfo when it is not valid).
func (c Config) SlogLevel() slog.Level {
	switch c.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Logger returns a logger writing to w in LogFormat at LogLevel.
func (c Config) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.SlogLevel()}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// pipTrusts reports whether pip uses the plain-HTTP index at u, not on loopback: a
// --trusted-host names its host, or its host and port (pip's network/session.py).
func pipTrusts(u *url.URL, trusted []string) bool {
	return slices.ContainsFunc(trusted, func(h string) bool { return strings.EqualFold(h, u.Hostname()) || strings.EqualFold(h, u.Host) })
}

// isLoopback reports whether host names the local machine: localhost, 127.0.0.0/8 or ::1.
func isLoopback(host string) bool {
	ip, err := netip.ParseAddr(host)
	return strings.EqualFold(host, "localhost") || (err == nil && ip.IsLoopback())
}

// The base images chosen when base_image is empty (see Config.BaseImage).
const (
	// RegistryBaseImage is the official Python image, pulled from a container registry.
	RegistryBaseImage = "python:3.11-slim"
	// OfflineBaseImage is the base scripts/offline-base-image.sh builds from Debian's packages
	// when no registry answers.
	OfflineBaseImage = "sandpit-base:bookworm-2"
)

// Validate checks every setting and reports every problem at once, joined with errors.Join;
// each message names the key, the value, what is allowed and where to change it.
// It returns nil when the configuration is usable.
func (c Config) Validate() error {
	var report problems
	c.checkPlaces(&report)
	c.checkRequests(&report)
	c.checkPackageIndex(&report)
	c.checkForkServer(&report)
	c.checkAgentCalls(&report)
	c.checkRetention(&report)
	c.checkRequestSizes(&report)
	c.checkBox(&report)
	c.checkRunLimits(&report)
	c.validateFiles(report.bad)
	c.checkSessions(&report)
	report.intRange("template_build_timeout_ms", c.TemplateBuildTimeoutMS, 10_000, 7_200_000, " milliseconds")
	report.intRange("template_max_bytes", c.TemplateMaxBytes, 64<<20, 1<<40, " bytes")
	report.intRange("templates_per_agent", int64(c.TemplatesPerAgent), 0, 1000, " templates")
	report.intRange("template_versions_kept", int64(c.TemplateVersionsKept), 0, 100, " versions")
	c.checkKubernetes(&report)
	c.checkLog(&report)
	return errors.Join(report.errs...)
}

// problems collects what Validate finds wrong, in the order found.
type problems struct{ errs []error }

// bad records that key's value is wrong: the message names the key, says what is wrong and
// allowed (format and args), and where to set it.
func (p *problems) bad(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s %s (set %q in the config file or %s)",
		key, fmt.Sprintf(format, args...), key, EnvName(key)))
}

// intRange records key's value v unless it is from lo to hi; unit follows the range in the
// message (" milliseconds").
func (p *problems) intRange(key string, v, lo, hi int64, unit string) {
	if v < lo || v > hi {
		p.bad(key, "is %d; allowed range is %d to %d%s", v, lo, hi, unit)
	}
}

// sizeAtLeast records key's size v unless it is at least lo bytes.
func (p *problems) sizeAtLeast(key string, v, lo int64) {
	if v < lo {
		p.bad(key, "is %s; it must be at least %s", FormatSize(v), FormatSize(lo))
	}
}

// checkPlaces checks the daemon's address, its data directory, the Docker engine and the sandbox
// image's recipe: listen, data_dir, docker_host, base_image, packages, image_repository.
func (c Config) checkPlaces(report *problems) {
	if c.Listen == "" {
		report.bad("listen", "is empty; give a host:port such as 127.0.0.1:8765")
	} else if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		report.bad("listen", "is %q, not a host:port address (%v); use a form such as 127.0.0.1:8765 or [::1]:8765", c.Listen, err)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		report.bad("listen", "is %q: the port must be a number from 0 to 65535, as in 127.0.0.1:8765", c.Listen)
	}
	switch {
	case c.DataDir == "":
		report.bad("data_dir", "is empty and no default could be found (neither XDG_DATA_HOME nor HOME is set); give an absolute directory")
	case !filepath.IsAbs(c.DataDir):
		report.bad("data_dir", "is %q, which is not an absolute path; give the full path (a leading ~ is not expanded)", c.DataDir)
	}
	if c.DatabaseURL != "" {
		if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			report.bad("database_url", "is %s, which is not a PostgreSQL URL; give postgres://user:password@host:5432/database (or leave it empty for SQLite in data_dir)", store.RedactURL(c.DatabaseURL))
		}
	}
	if c.DaemonID != "" && !validDaemonID(c.DaemonID) {
		report.bad("daemon_id", "is %q; use 1 to 64 letters, digits, '.', '_' or '-' (or leave it empty for an ID kept in data_dir)", c.DaemonID)
	}
	if c.DockerHost != "" && !strings.Contains(c.DockerHost, "://") {
		report.bad("docker_host", "is %q; give a URL such as unix:///var/run/docker.sock or tcp://host:2376, or leave it empty to use the Docker client's environment", c.DockerHost)
	}
	if strings.IndexFunc(c.BaseImage, unicode.IsSpace) >= 0 {
		report.bad("base_image", "is %q, which contains white space; name an image such as python:3.11-slim, or leave it empty to choose one", c.BaseImage)
	}
	for i, p := range c.Packages {
		switch {
		case strings.TrimSpace(p) == "":
			report.bad("packages", "has an empty entry at position %d; remove it", i+1)
		case strings.HasPrefix(p, "-"):
			report.bad("packages", "entry %q starts with '-', which pip would read as an option; give package names or requirement specifiers only", p)
		case strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			report.bad("packages", "entry %q contains white space; give one package or requirement specifier (such as numpy>=1.26) per entry", p)
		}
	}
	if msg := checkRepository(c.ImageRepository); msg != "" {
		report.bad("image_repository", "is %q: %s", c.ImageRepository, msg)
	}
}

// executionsPerAgent is executions_per_agent in force: its value, or the default for the
// slots and the queue when it is 0.
func (c Config) executionsPerAgent() int {
	if c.ExecutionsPerAgent == 0 {
		return engine.DefaultExecutionsPerAgent(c.Slots, c.QueueLength)
	}
	return c.ExecutionsPerAgent
}

// checkRequests checks how many runs are taken, and for how long: slots, queue_length, the
// timeouts, grace_ms, install_timeout_ms and max_dependencies.
func (c Config) checkRequests(report *problems) {
	report.intRange("slots", int64(c.Slots), 1, 64, " runs at once")
	report.intRange("queue_length", int64(c.QueueLength), 0, 10000, " waiting requests")
	if c.ExecutionsPerAgent < 0 || c.ExecutionsPerAgent > c.Slots+c.QueueLength {
		report.bad("executions_per_agent", "is %d; allowed range is 0 (the default: max(1, slots-1) + queue_length/2) to slots + queue_length (%d: no cap)",
			c.ExecutionsPerAgent, c.Slots+c.QueueLength)
	}
	report.intRange("max_timeout_ms", c.MaxTimeoutMS, 1, 86_400_000, " milliseconds (24 hours)")
	if hi := max(c.MaxTimeoutMS, 1); c.DefaultTimeoutMS < 1 || c.DefaultTimeoutMS > hi {
		report.bad("default_timeout_ms", "is %d; allowed range is 1 to max_timeout_ms (%d) milliseconds; lower it or raise max_timeout_ms", c.DefaultTimeoutMS, c.MaxTimeoutMS)
	}
	report.intRange("grace_ms", c.GraceMS, 100, 600_000, " milliseconds")
	report.intRange("install_timeout_ms", c.InstallTimeoutMS, 1000, 3_600_000, " milliseconds")
	report.intRange("max_dependencies", int64(c.MaxDependencies), 1, 500, " requirements")
}

// checkPackageIndex checks where pip finds dependencies, as the sandbox's container reaches it:
// index_url, extra_index_urls and trusted_hosts.
func (c Config) checkPackageIndex(report *problems) {
	for key, urls := range map[string][]string{"index_url": {c.IndexURL}, "extra_index_urls": c.ExtraIndexURLs} {
		for _, u := range urls {
			if u == "" && key == "index_url" {
				continue
			}
			p, err := url.Parse(u)
			switch {
			case err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || strings.HasPrefix(u, "-"):
				report.bad(key, "has %q, which is not an http(s) URL; give an index such as https://pypi.example.com/simple", u)
			case isLoopback(p.Hostname()):
				report.bad(key, "has %q, but pip runs inside the sandbox's container, where %s is the container itself, not this machine; "+
					"reach an index on this machine as host.docker.internal (Docker Desktop, Colima) or the Docker bridge's gateway "+
					"(`docker network inspect bridge`, usually 172.17.0.1), listening on that address, and add that host to trusted_hosts for plain HTTP", u, p.Hostname())
			case p.Scheme == "http" && !pipTrusts(p, c.TrustedHosts):
				report.bad(key, "has %q, a plain-HTTP index whose host is not in trusted_hosts: pip ignores such an index, and every install "+
					"would fail with \"No matching distribution found\"; add %q to trusted_hosts, or serve the index over HTTPS", u, p.Hostname())
			}
		}
	}
	for _, h := range c.TrustedHosts {
		if h == "" || strings.HasPrefix(h, "-") || strings.ContainsAny(h, " /\t\n") {
			report.bad("trusted_hosts", "has %q; give host names (optionally with :port) such as pypi.example.com", h)
		}
	}
}

// checkForkServer checks the fork server: preload and fork_server_max_runs.
func (c Config) checkForkServer(report *problems) {
	if len(c.Preload) > 64 {
		report.bad("preload", "has %d modules; at most 64", len(c.Preload))
	}
	for _, m := range c.Preload {
		if !sandbox.IsModuleName(m) {
			report.bad("preload", "has %q, which is not a Python module name; give dotted names such as numpy or scipy.stats", m)
		}
	}
	report.intRange("fork_server_max_runs", int64(c.ForkServerMaxRuns), 0, 1_000_000_000, " runs (0: never replaced)")
}

// checkAgentCalls checks the agent.* calls of a run and the host application that may answer
// them: max_calls, max_call_bytes, call_timeout_ms, callback_url and callback_secret.
func (c Config) checkAgentCalls(report *problems) {
	report.intRange("max_calls", int64(c.MaxCalls), 0, 1_000_000, " calls")
	report.intRange("max_call_bytes", c.MaxCallBytes, 1<<10, 32<<20, " bytes (1KiB to 32MiB)")
	report.intRange("call_timeout_ms", c.CallTimeoutMS, 100, 600_000, " milliseconds")
	if c.CallbackURL != "" {
		if p, err := url.Parse(c.CallbackURL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			report.bad("callback_url", "is %q, which is not an http(s) URL; give the host application's endpoint, such as http://127.0.0.1:9000/sandpit", c.CallbackURL)
		}
		if len(c.CallbackSecret) < 16 {
			report.bad("callback_secret", "must be set to at least 16 characters with callback_url: it signs every call sent to the host application")
		}
	}
}

// checkRetention checks what the database keeps: results_max_bytes, results_max_versions,
// ledger_max_age_days, ledger_max_executions and ledger_max_bytes.
func (c Config) checkRetention(report *problems) {
	report.intRange("results_max_bytes", c.ResultsMaxBytes, 1<<10, 1<<40, " bytes (1KiB to 1TiB)")
	report.intRange("results_max_versions", c.ResultsMaxVersions, 1, 1_000_000, " versions")
	report.intRange("jobs_per_agent", c.JobsPerAgent, 1, 100_000, " jobs")
	report.intRange("jobs_max", c.JobsMax, 1, 1_000_000, " jobs")
	report.intRange("job_files_max_bytes", c.JobFilesMaxBytes, 0, 64<<30, " bytes (0: no limit; at most 64GiB)")
	report.intRange("ledger_max_age_days", c.LedgerMaxAgeDays, 0, 36_500, " days (0: no age limit)")
	report.intRange("ledger_max_executions", c.LedgerMaxExecutions, 0, 100_000_000, " records (0: no count limit)")
	if b := c.LedgerMaxBytes; b != 0 && (b < minLedgerBytes || b > maxLedgerBytes) {
		report.bad("ledger_max_bytes", "is %s; give 0 (no byte limit) or %s to %s (64 TiB): the ledger must hold a few runs at their caps",
			FormatSize(b), FormatSize(minLedgerBytes), FormatSize(maxLedgerBytes))
	}
}

// checkRequestSizes checks the size of requests: max_code_bytes, max_input_bytes,
// bodies_max_bytes and max_connections.
func (c Config) checkRequestSizes(report *problems) {
	report.intRange("max_code_bytes", c.MaxCodeBytes, 1, gib, " bytes (1GiB)")
	report.intRange("max_input_bytes", c.MaxInputBytes, 1, gib, " bytes (1GiB)")
	report.intRange("bodies_max_bytes", c.BodiesMaxBytes, 1, 64*gib, " bytes (64GiB; raised to the largest body one request may send)")
	report.intRange("reads_max_bytes", c.ReadsMaxBytes, 1, 64*gib, " bytes (64GiB; raised to two copies of the largest read)")
	report.intRange("max_connections", c.MaxConnections, 16, 1_000_000, " connections")
}

// checkBox checks each slot's container: memory_bytes, memory_swap_bytes, cpus, pids_limit, uid_block,
// tmp_bytes, run_dir_bytes, network and runtime.
func (c Config) checkBox(report *problems) {
	report.sizeAtLeast("memory_bytes", c.MemoryBytes, 64*mib)
	if c.MemorySwapBytes != 0 && c.MemorySwapBytes < c.MemoryBytes {
		report.bad("memory_swap_bytes", "is %s, less than memory_bytes (%s); it counts memory plus swap, so give 0 for no swap or at least memory_bytes",
			FormatSize(c.MemorySwapBytes), FormatSize(c.MemoryBytes))
	}
	if !(c.CPUs > 0 && c.CPUs <= 64) {
		report.bad("cpus", "is %v; it must be more than 0 and at most 64, such as 1 or 0.5", c.CPUs)
	}
	if c.PidsLimit < 16 {
		report.bad("pids_limit", "is %d; it must be at least 16", c.PidsLimit)
	}
	if c.UIDBlock < 0 || c.UIDBlock >= boxspec.UIDBlocks {
		report.bad("uid_block", "is %d; it must be 0 to %d, one for each daemon whose sandboxes share a host or node", c.UIDBlock, boxspec.UIDBlocks-1)
	}
	report.sizeAtLeast("tmp_bytes", c.TmpBytes, mib)
	report.sizeAtLeast("run_dir_bytes", c.RunDirBytes, mib)
	switch c.Network {
	case "full", "none", "allowlist":
	default:
		report.bad("network", "is %q; it must be \"full\", \"none\" or \"allowlist\"", c.Network)
	}
	for _, e := range c.NetworkAllow {
		if _, err := egress.ParseRule(e); err != nil {
			report.bad("network_allow", "%s", strings.TrimPrefix(err.Error(), "network_allow "))
		}
	}
	for _, set := range []struct {
		name    string
		entries []string
	}{{"template_apt_hosts", c.TemplateAptHosts}, {"template_build_allow", c.TemplateBuildAllow}} {
		for _, e := range set.entries {
			if _, err := egress.ParseRule(e); err != nil {
				report.bad(set.name, "%s", strings.Replace(err.Error(), "network_allow entry", "entry", 1))
			}
		}
	}
	if len(c.NetworkAllow) > 0 && c.Network != "allowlist" {
		report.bad("network_allow", "is set, but network is %q; it applies only with network \"allowlist\"", c.Network)
	}
	if c.EgressMaxConnections < 1 || c.EgressMaxConnections > 100_000 {
		report.bad("egress_max_connections", "is %d; allowed range is 1 to 100000", c.EgressMaxConnections)
	}
	report.sizeAtLeast("egress_max_bytes_sent", c.EgressMaxBytesSent, 1024)
	report.sizeAtLeast("egress_max_bytes_received", c.EgressMaxBytesReceived, 1024)
	if c.EgressConnectionTimeoutMS < 1000 || c.EgressConnectionTimeoutMS > 86_400_000 {
		report.bad("egress_connection_timeout_ms", "is %d; allowed range is 1000 to 86400000 milliseconds", c.EgressConnectionTimeoutMS)
	}
	if c.Runtime != "runc" && c.Runtime != "runsc" && c.Runtime != RuntimeKubernetes {
		report.bad("runtime", "is %q; it must be \"runc\" (the engine's default), \"runsc\" (gVisor) or \"kubernetes\" (pods of a cluster)", c.Runtime)
	}
}

// checkRunLimits checks the limits of each run inside its box: run_memory_bytes, the stream and
// OUTPUT caps, file_size_bytes, open_files and processes.
func (c Config) checkRunLimits(report *problems) {
	if c.RunMemoryBytes != 0 && (c.RunMemoryBytes < 16*mib || c.RunMemoryBytes > c.MemoryBytes) {
		report.bad("run_memory_bytes", "is %s; it must be 0 (meaning memory_bytes) or from 16MiB to memory_bytes (%s)",
			FormatSize(c.RunMemoryBytes), FormatSize(c.MemoryBytes))
	}
	report.sizeAtLeast("stdout_bytes", c.StdoutBytes, 1)
	report.sizeAtLeast("stderr_bytes", c.StderrBytes, 1)
	report.sizeAtLeast("output_bytes", c.OutputBytes, 1)
	if c.FileSizeBytes < 0 {
		report.bad("file_size_bytes", "is %d; it must be 0 (no limit) or a positive size", c.FileSizeBytes)
	}
	if c.OpenFiles != 0 && (c.OpenFiles < 16 || c.OpenFiles > 1<<20) {
		report.bad("open_files", "is %d; it must be 0 (no limit) or from 16 to 1048576", c.OpenFiles)
	}
	if c.Processes < 0 {
		report.bad("processes", "is %d; it must be 0 (no limit) or a positive count", c.Processes)
	}
}

// checkLog checks the daemon's log: log_level and log_format.
func (c Config) checkLog(report *problems) {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		report.bad("log_level", "is %q; it must be \"debug\", \"info\", \"warn\" or \"error\"", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		report.bad("log_format", "is %q; it must be \"text\" or \"json\"", c.LogFormat)
	}
}

// checkRepository returns why name is not a usable image repository, or "".
func checkRepository(name string) string {
	if name == "" {
		return "it is empty; give a repository name such as sandpit-sandbox"
	}
	last := name[strings.LastIndexByte(name, '/')+1:]
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsUpper(r) || r == '@' {
			return "repository names may not contain white space, upper-case letters or '@'; use lower case such as sandpit-sandbox"
		}
	}
	if last == "" || strings.Contains(last, ":") {
		return "give the repository without a tag (sandpit chooses the tag), such as sandpit-sandbox"
	}
	return ""
}

// validDaemonID says whether id is a daemon_id: 1 to 64 letters, digits, '.', '_' or '-'.
func validDaemonID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-')) {
			return false
		}
	}
	return true
}
