package docker_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// probeFamilies tries to create (and, for vsock, listen on) sockets of the families sandpit's
// seccomp profile refuses, and a UDP socket, printing one line per attempt: "ok" or the errno's
// name.
const probeFamilies = `import errno, socket
def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def vsock_listen():
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.bind((socket.VMADDR_CID_ANY, 7000))
    s.listen()
attempt("vsock", vsock_listen)
attempt("alg", lambda: socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM))
attempt("family-45", lambda: socket.socket(45, socket.SOCK_STREAM))
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("tcp", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_NONBLOCK))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt("getaddrinfo", lambda: socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM))
`

// probeAIO calls io_setup (Linux AIO: takes from the host-wide fs.aio-nr pool) and
// io_uring_setup through libc, printing "ok" or the errno's name for each.
const probeAIO = `import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
ctx = ctypes.c_ulong(0)
params = ctypes.create_string_buffer(120)
for name, nr, args in [("io_setup", 206, (128, ctypes.byref(ctx))), ("io_uring_setup", 425, (1, params))]:
    r = libc.syscall(nr, *args)
    print(name, "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()])
`

// H35–H36: sandpit's own seccomp profile. Under runc a run could listen on the VM's vsock
// (no network namespace isolates it; the engine's default profile allowed it), take the
// host-wide Linux AIO pool with io_setup and use io_uring; now every family but unix, IPv4,
// IPv6 and netlink is EAFNOSUPPORT, AIO and io_uring ENOSYS, and with no network a run makes
// no UDP socket. Under runsc gVisor's own kernel answers (no vsock; its AIO and io_uring are
// its own, touching no host counter), and the profile's JSON is on the container all the same.
func TestKernelSurface(t *testing.T) {
	for _, c := range []struct {
		runtime, network string
		families, aio    string
	}{
		{"runc", "none",
			"vsock EAFNOSUPPORT\nalg EAFNOSUPPORT\npacket EAFNOSUPPORT\nfamily-45 EAFNOSUPPORT\nunix ok\ntcp ok\nnetlink ok\nudp EPERM\ngetaddrinfo ok\n",
			"io_setup ENOSYS\nio_uring_setup ENOSYS\n"},
		{"runc", "full",
			"vsock EAFNOSUPPORT\nalg EAFNOSUPPORT\npacket EAFNOSUPPORT\nfamily-45 EAFNOSUPPORT\nunix ok\ntcp ok\nnetlink ok\nudp ok\ngetaddrinfo ok\n",
			"io_setup ENOSYS\nio_uring_setup ENOSYS\n"},
		{"runsc", "none",
			"vsock EAFNOSUPPORT\nalg EAFNOSUPPORT\npacket EPERM\nfamily-45 EAFNOSUPPORT\nunix ok\ntcp ok\nnetlink ok\nudp ok\ngetaddrinfo ok\n",
			""},
	} {
		t.Run(c.runtime+"/"+c.network, func(t *testing.T) {
			name := c.runtime
			if name == "runsc" {
				name = testenv.ContainerRuntime(t, "runsc")
			}
			rt, _ := startRuntime(t, func(cfg *docker.Config) {
				cfg.Slots, cfg.Box.Network = 1, c.network
				if name == "runsc" {
					cfg.Box.Runtime = name
				}
			})
			ins, err := api.ContainerInspect(context.Background(), rt.ContainerID(), client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := docker.SeccompDigestOf(ins.Container.HostConfig.SecurityOpt), docker.SeccompDigest(c.network); got != want {
				t.Errorf("container's seccomp profile %q, want sandpit's %q", got, want)
			}
			res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec(probeFamilies, 20*time.Second), nil)
			if res.Outcome != sandbox.OutcomeOK || res.Stdout != c.families {
				t.Errorf("socket families: outcome %q stdout\n%s\nwant\n%s\nstderr %s", res.Outcome, res.Stdout, c.families, res.Stderr)
			}
			if c.aio != "" {
				res = sandboxtest.Exec(t, rt, 0, sandboxtest.Spec(probeAIO, 20*time.Second), nil)
				if res.Outcome != sandbox.OutcomeOK || res.Stdout != c.aio {
					t.Errorf("AIO and io_uring: outcome %q stdout %q, want %q; stderr %s", res.Outcome, res.Stdout, c.aio, res.Stderr)
				}
			}
		})
	}
}

// holdSocketBuffers opens loopback TCP pairs (eight processes, 25 each) and fills each without
// reading, then reports what it queued (MiB) and holds them: the red team's attack, which held 826 MiB of host kernel
// memory in a 512 MiB box whose cgroup showed 130 MiB.
const holdSocketBuffers = `import os, resource, socket, time
per = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2 - 8
r, w = os.pipe()
for child in range(8):
    if os.fork() == 0:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(512)
        pairs, queued = [], 0
        for i in range(min(per, 25)):
            c = socket.create_connection(srv.getsockname())
            a, _ = srv.accept()
            c.setblocking(False)
            try:
                for _ in range(2000):
                    queued += c.send(b"x" * 65536)
            except (BlockingIOError, OSError):
                pass
            pairs.append((c, a))
        os.write(w, b"%d\n" % queued)
        os.close(w)
        time.sleep(60)
        os._exit(0)
os.close(w)
total = sum(int(n) for n in os.fdopen(r).read().split())
print(total // 2**20, flush=True)
time.sleep(60)
`

// tcpMemPages is the host's TCP buffer memory in pages (/proc/net/sockstat's "TCP: ... mem"):
// host-wide, so the measurement is taken from outside the box.
func tcpMemPages(t *testing.T) int64 {
	raw, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP: "); ok {
			f := strings.Fields(rest)
			for i := 0; i+1 < len(f); i += 2 {
				if f[i] == "mem" {
					n, _ := strconv.ParseInt(f[i+1], 10, 64)
					return n
				}
			}
		}
	}
	t.Fatal("no TCP mem in /proc/net/sockstat")
	return 0
}

// H37: unread loopback TCP buffers no longer escape the box's memory limit on cgroup v1: the
// box's TCP accounting holds them to docker.TCPMemoryBytes, measured from the host while the
// run holds 200 filled pairs.
func TestSocketBuffersAreBounded(t *testing.T) {
	if docker.CgroupV2() {
		t.Skip("cgroup v2 charges socket buffers to the box's memory limit")
	}
	rt, _ := startRuntime(t, func(cfg *docker.Config) { cfg.Slots, cfg.Box.Network = 1, "none" })
	limit, on, err := docker.TCPMemoryLimit(context.Background(), api, rt.ContainerID())
	if err != nil || !on || limit != docker.TCPMemoryBytes {
		t.Fatalf("the box's TCP limit is %d (accounting on: %v, %v), want %d", limit, on, err, docker.TCPMemoryBytes)
	}
	before := tcpMemPages(t)
	var (
		mu     sync.Mutex
		during int64 = -1
		queued string
	)
	spec := sandboxtest.Spec(holdSocketBuffers, 120*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	res, err := rt.Run(runCtx, 0, spec, func(ev sandbox.Event) {
		if ev.Stream != sandbox.StreamStdout {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if during < 0 {
			during, queued = tcpMemPages(t), strings.TrimSpace(ev.Data)
			stop() // measured: end the run
		}
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if during < 0 {
		t.Fatalf("the attack printed nothing: outcome %q, %v, stderr %s", res.Outcome, err, res.Stderr)
	}
	held := (during - before) * int64(os.Getpagesize())
	t.Logf("the run queued %s MiB; the host's TCP buffers grew by %d MiB (%d pages before, %d during)", queued, held>>20, before, during)
	// The box's own limit, plus what other tests on the machine may be doing meanwhile.
	if held > docker.TCPMemoryBytes+64<<20 {
		t.Fatalf("one box's unread sockets hold %d MiB of host kernel memory, over its %d MiB TCP limit", held>>20, docker.TCPMemoryBytes>>20)
	}
}

// floodSocketBuffers fills loopback TCP pairs without reading them from as many processes as
// the run may have, until the box runs out of memory or the pairs are all full.
const floodSocketBuffers = `import os, resource, socket, time
per = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2 - 8
for child in range(12):
    if os.fork() == 0:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(512)
        pairs = []
        for i in range(per):
            c = socket.create_connection(srv.getsockname())
            a, _ = srv.accept()
            c.setblocking(False)
            try:
                while True:
                    c.send(b"x" * 65536)
            except OSError:
                pass
            pairs.append((c, a))
        time.sleep(120)
        os._exit(0)
time.sleep(120)
`

// H38: under runsc a run could end its own run as sandbox_error and force a rebuild by
// queueing socket buffers in gVisor's network stack, which the executor's watch of the box's
// free memory does not see, until the engine killed the whole sandbox for memory. A run during
// which its box was killed for memory is now memory_limit, and each socket's buffers are
// bounded there too (gVisor ignores the container's sysctls: the executor writes them).
func TestRunscSocketFloodIsMemoryLimit(t *testing.T) {
	name := testenv.ContainerRuntime(t, "runsc")
	rt, _ := startRuntime(t, func(cfg *docker.Config) {
		cfg.Slots, cfg.Box.Runtime, cfg.Box.Network = 1, name, "none"
		cfg.ForkServer.Preload = []string{"numpy"}
	})
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("print(open('/proc/sys/net/ipv4/tcp_rmem').read().split()[2], open('/proc/sys/net/ipv4/tcp_wmem').read().split()[2])", 20*time.Second), nil)
	if want := fmt.Sprintf("%d %d\n", docker.SocketBufferMax, docker.SocketBufferMax); res.Stdout != want {
		t.Errorf("the box's TCP buffer maxima: %q, want %q (%s)", res.Stdout, want, res.Stderr)
	}
	res = sandboxtest.Exec(t, rt, 0, sandboxtest.Spec(floodSocketBuffers, 90*time.Second), nil)
	t.Logf("flood: outcome %s, reason %q", res.Outcome, res.Reason)
	if res.Outcome != sandbox.OutcomeMemoryLimit && res.Outcome != sandbox.OutcomeTimeout {
		t.Errorf("the socket flood ended %q (%s), want memory_limit (or timeout, when the box held)", res.Outcome, res.Reason)
	}
	// As the Service does before a slot's next run: its cleanup ends, or it gets a new
	// container (a box left near its limit can stop answering).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rt.Settle(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("print(1)", 20*time.Second), nil); res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("the next run: %s %s", res.Outcome, res.Reason)
	}
}
