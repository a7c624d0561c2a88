package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// daemon is the bench's own `sandpit serve`, a child process.
type daemon struct {
	cmd  *exec.Cmd
	addr string // host:port of its REST API
	log  *tail  // the end of its output, for error messages

	done    chan struct{} // closed when it has exited
	waitErr error         // how it exited; read after done
}

// startDaemon starts argv (a `sandpit ... serve` command line) with --data-dir dataDir and
// --listen on a free loopback port, in the bench's environment with env added (a variable set
// in both takes env's value). Its output goes to logw (may be nil) and, the last part,
// to the daemon's log tail. It runs in its own process group, so a Ctrl-C at the terminal
// reaches the bench, which stops it in order, and not the daemon directly.
func startDaemon(argv, env []string, dataDir string, logw io.Writer) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	d := &daemon{addr: addr, log: &tail{max: 16 << 10, w: logw}, done: make(chan struct{})}
	args := append(argv[1:len(argv):len(argv)], "--data-dir="+dataDir, "--listen="+addr)
	d.cmd = exec.Command(argv[0], args...)
	if len(env) > 0 {
		d.cmd.Env = append(os.Environ(), env...) // exec keeps the last value of a duplicate
	}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = daemonProcAttr()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the bench's daemon (%s): %w", argv[0], err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// pid is the daemon's process ID.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// exited reports whether the daemon has exited.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop sends the daemon SIGTERM and waits for it to exit, up to grace; then it kills it.
// A daemon that had already exited is not an error here: the caller reports how it exited.
func (d *daemon) stop(grace time.Duration) error {
	if d.exited() {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(grace):
	}
	_ = d.cmd.Process.Kill()
	<-d.done
	return fmt.Errorf("the bench's daemon did not stop within %s of SIGTERM and was killed", grace)
}

// exitError describes how the daemon exited, with the end of its log.
func (d *daemon) exitError() error {
	return fmt.Errorf("the bench's daemon exited (%v); the end of its log:\n%s", d.waitErr, d.log.String())
}

// freePort asks the kernel for a free TCP port on loopback. Another process could take it
// before the daemon listens: the daemon then fails to start and says so.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// readRSS returns the resident set size of process pid on this machine (VmRSS of
// /proc/PID/status), in bytes.
func readRSS(pid int) (int64, error) {
	m, err := readMemory(pid)
	return m.rss, err
}

// readMemory returns the memory of process pid on this machine, from /proc/PID/status.
func readMemory(pid int) (procMemory, error) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return procMemory{}, fmt.Errorf("reading the daemon's memory: %w (only Linux has /proc)", err)
		}
		return procMemory{}, fmt.Errorf("reading the daemon's memory: %w", err)
	}
	return parseProcStatus(status)
}

// processCPUTime returns the user and system CPU time process pid (all its threads) has used
// on this machine, from /proc/PID/stat.
func processCPUTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("reading the daemon's CPU time: %w", err)
	}
	return parseProcStat(stat)
}

// clockTick is the unit of the times in /proc/PID/stat (USER_HZ, 100 on every Linux
// architecture Go supports).
const clockTick = 10 * time.Millisecond

// parseProcStat reads utime and stime (fields 14 and 15) from the text of /proc/PID/stat and
// returns their sum. The command name (field 2) is in parentheses and may hold spaces or
// parentheses itself, so the fields are counted from the last ')'.
func parseProcStat(stat []byte) (time.Duration, error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/PID/stat: %q", truncate(stat, 100))
	}
	fields := strings.Fields(s[i+1:]) // from field 3, the state
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/PID/stat: %q", truncate(stat, 100))
	}
	var total int64
	for _, f := range fields[11:13] { // fields 14 and 15
		ticks, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc/PID/stat: %q", truncate(stat, 100))
		}
		total += ticks
	}
	return time.Duration(total) * clockTick, nil
}

// tail keeps the last max bytes written to it, passing everything on to w (when not nil).
type tail struct {
	max int
	w   io.Writer

	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what was kept.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
