package sandboxtest

// The cases of concurrent runs attacking each other (H25–H27 of docs/hostile-cases.md): an
// attacker in one slot, a victim in another, at the same time. Cases that need every slot to be
// its own sandbox (network namespace, /tmp) run only when Harness.IsolatedSlots says the
// runtime gives that.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// concurrently runs attacker in slot 1 and, once it has said "ready" on stdout, victim in
// slot 0; it returns both results.
func (s *Suite) concurrently(t *testing.T, attacker, victim string) (sandbox.Result, sandbox.Result) {
	t.Helper()
	ready := make(chan struct{})
	var once sync.Once
	var a sandbox.Result
	var wg sync.WaitGroup
	wg.Go(func() {
		defer once.Do(func() { close(ready) }) // also when the attacker's run fails
		spec := Spec(attacker, 20*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		a, err = s.rt.Run(ctx, 1, spec, func(e sandbox.Event) {
			if e.Stream == "stdout" && strings.Contains(e.Data, "ready") {
				once.Do(func() { close(ready) })
			}
		})
		if err != nil {
			t.Errorf("the attacker's run: system error: %v", err) // not Fatal: another goroutine
		}
	})
	<-ready
	v := Exec(t, s.rt, 0, Spec(victim, HeavyImportTimeout), nil)
	wg.Wait()
	return a, v
}

// TestH25NoConfigDirectoryAnotherRunCanPlantIn: H25 no per-run configuration directory at a path another run can plant in.
func (s *Suite) TestH25NoConfigDirectoryAnotherRunCanPlantIn(t *testing.T) {
	// The attacker plants a matplotlib directory for every slot uid of its block (its own uid's;
	// see boxspec.UIDBlock) wherever a run could write, and keeps doing so while the victim
	// draws a chart.
	attacker := `import os, time
targets = ['/tmp', '/dev/shm', '/sandbox']
first = 10000 + (os.getuid() - 10000) // 128 * 128
def plant():
    for base in targets:
        for uid in range(first, first + 64):
            for name in ('.matplotlib-%d' % uid, 'matplotlib-%d' % uid):
                d = os.path.join(base, name)
                try:
                    os.makedirs(d, exist_ok=True)
                    os.chmod(d, 0o777)
                    open(os.path.join(d, 'fontlist-v330.json'), 'w').write('{"planted": true}')
                    open(os.path.join(d, 'matplotlibrc'), 'w').write('font.family: planted\n')
                except OSError:
                    pass
plant()
print('ready', flush=True)
end = time.time() + 3
while time.time() < end:
    plant()
    time.sleep(0.05)`
	victim := `import os, matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.savefig('chart.png')
cfg = matplotlib.get_configdir()
parent = os.stat(os.path.dirname(cfg))
st = os.stat(cfg)
planted = any('planted' in open(os.path.join(cfg, f), errors='replace').read()
              for f in os.listdir(cfg) if os.path.isfile(os.path.join(cfg, f)))
print(parent.st_uid in (0, os.getuid()) and not parent.st_mode & 0o022, st.st_uid == os.getuid(), oct(st.st_mode & 0o777), planted,
      matplotlib.rcParams['font.family'])`
	if !s.HasModule("matplotlib") {
		t.Skip("the box has no matplotlib")
	}
	a, v := s.concurrently(t, attacker, victim)
	expect(t, a, sandbox.OutcomeOK)
	expect(t, v, sandbox.OutcomeOK)
	if got := strings.TrimSpace(v.Stdout); got != "True True 0o700 False ['sans-serif']" {
		t.Fatalf("victim's matplotlib directory: %q, want it in a directory only root or the run may write, its own, 0700, with nothing planted", got)
	}
}

// TestH26LoopbackAndAbstractSocketsAreTheSlotsOwn: H26 loopback and abstract sockets are the slot's own.
func (s *Suite) TestH26LoopbackAndAbstractSocketsAreTheSlotsOwn(t *testing.T) {
	if !s.IsolatedSlots {
		t.Skip("this runtime's slots share a network namespace")
	}
	name := fmt.Sprintf("sandpit-svc-%d", time.Now().UnixNano())
	attacker := fmt.Sprintf(`import socket, time
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(('127.0.0.1', 8000)); tcp.listen()
unix = socket.socket(socket.AF_UNIX); unix.bind('\0%s'); unix.listen()
tcp.settimeout(2.5); unix.settimeout(0.1)
print('ready', flush=True)
got = []
for s in (tcp, unix):
    try:
        c, _ = s.accept(); got.append(c.recv(100))
    except OSError:
        pass
print('received', got)`, name)
	victim := fmt.Sprintf(`import socket
tcp = socket.socket(); tcp.bind(('127.0.0.1', 8000)); tcp.listen()
unix = socket.socket(socket.AF_UNIX); unix.bind('\0%s'); unix.listen()
print('bound both')
for family, addr in ((socket.AF_INET, ('127.0.0.1', 8000)), (socket.AF_UNIX, '\0%s')):
    c = socket.socket(family); c.connect(addr); c.sendall(b'secret')
    peer, _ = (tcp if family == socket.AF_INET else unix).accept()
    print('own listener got', peer.recv(100))`, name, name)
	a, v := s.concurrently(t, attacker, victim)
	expect(t, a, sandbox.OutcomeOK)
	expect(t, v, sandbox.OutcomeOK)
	if want := "bound both\nown listener got b'secret'\nown listener got b'secret'\n"; v.Stdout != want {
		t.Fatalf("victim stdout %q, want %q", v.Stdout, want)
	}
	if a.Stdout != "ready\nreceived []\n" {
		t.Fatalf("attacker stdout %q: it reached the victim's sockets", a.Stdout)
	}
}

// TestPerUserKernelLimitsAreTheSlotsOwn: per-user kernel limits are the slot's own.
func (s *Suite) TestPerUserKernelLimitsAreTheSlotsOwn(t *testing.T) {
	// The kernel counts processes, inotify instances and POSIX message queue bytes per
	// uid across the whole host: a run using them up must not stop another slot's run.
	if !s.IsolatedSlots {
		t.Skip("this runtime's slots share a box")
	}
	attacker := `import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
kids = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(10); os._exit(0)
        kids.append(pid)
except OSError:
    pass
fds = [libc.inotify_init() for _ in range(200)]
print('ready', len(kids) > 0, flush=True)
time.sleep(2.5)`
	victim := `import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
t = threading.Thread(target=lambda: None); t.start(); t.join()
print(subprocess.run(['true']).returncode, libc.inotify_init() >= 0)`
	a, v := s.concurrently(t, attacker, victim)
	expect(t, v, sandbox.OutcomeOK)
	if v.Stdout != "0 True\n" {
		t.Fatalf("victim stdout %q, want a process, a thread and an inotify instance of its own", v.Stdout)
	}
	// A runtime may stop the attacker: at its process cap (killed), or for its memory. gVisor
	// breaks copy-on-write in 2 MiB blocks, so 200 forks of a preloaded interpreter can bring
	// the box near its limit, and the executor's memory watch stops the run (seen in CI on the
	// Kubernetes cluster's gVisor pods, 2 December 2026).
	switch a.Outcome {
	case sandbox.OutcomeOK, sandbox.OutcomeKilled, sandbox.OutcomeMemoryLimit:
	default:
		t.Fatalf("attacker: outcome %q (%s)", a.Outcome, a.Reason)
	}
}

// TestH27AnotherRunsTmpFilesAreNotVisible: H27 another run's files in /tmp are not visible.
func (s *Suite) TestH27AnotherRunsTmpFilesAreNotVisible(t *testing.T) {
	if !s.IsolatedSlots {
		t.Skip("this runtime's slots share /tmp")
	}
	attacker := `import os, time
for d in ('/tmp', '/dev/shm'):
    p = os.path.join(d, 'attacker-secret')
    open(p, 'w').write('secret'); os.chmod(p, 0o666)
print('ready', flush=True)
time.sleep(2)`
	victim := `import os
print(sorted(n for d in ('/tmp', '/dev/shm') for n in os.listdir(d)))`
	a, v := s.concurrently(t, attacker, victim)
	expect(t, a, sandbox.OutcomeOK)
	expect(t, v, sandbox.OutcomeOK)
	if strings.Contains(v.Stdout, "attacker-secret") {
		t.Fatalf("the victim sees the attacker's files: %s", v.Stdout)
	}
}
