package app_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/testenv/logbuf"
)

// sandpitBinary builds cmd/sandpit from this checkout into a directory of the test.
func sandpitBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandpit")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sandpit-dev/sandpit/cmd/sandpit").CombinedOutput(); err != nil {
		t.Fatalf("building sandpit: %v\n%s", err, out)
	}
	return bin
}

// screen is what a terminal's program wrote, read from the PTY's master side as it comes.
type screen struct{ logbuf.Buffer }

// waitFor waits up to 30 s for the screen to show want, typing again (retype, unless empty)
// every 2 s: a resize reaches the command a moment after its signal.
func (s *screen) waitFor(t *testing.T, ptm *os.File, want, retype string) {
	t.Helper()
	deadline, next := time.Now().Add(30*time.Second), time.Now()
	for !strings.Contains(s.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q in 30 s; it shows:\n%q", want, s.String())
		}
		if retype != "" && time.Now().After(next) {
			if _, err := io.WriteString(ptm, retype); err != nil {
				t.Fatal(err)
			}
			next = time.Now().Add(2 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawMode says whether tty is in raw mode: no echo and no line editing by the kernel.
func rawMode(t *testing.T, tty *os.File) bool {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) == 0
}

// TestSessionExecTerminal: `session exec -t ID -- bash` is an interactive terminal, as docker
// exec -it is, over the daemon's PTY routes: the CLI's terminal is in raw mode while it runs
// (and restored after), keys reach the command (Ctrl-C interrupts the command, not the CLI), the
// command sees the terminal's size and its changes (SIGWINCH), and the CLI exits with the
// command's status. A CLI that is stopped hangs the command up (SIGHUP). The CLI runs as a
// process of its own on a PTY from creack/pty, its controlling terminal, so that the kernel
// sends it SIGWINCH.
func TestSessionExecTerminal(t *testing.T) {
	url, _ := sessionDaemon(t, t.TempDir())
	bin := sandpitBinary(t)
	status, body := httpCall(t, "POST", url+"/v1/agents/tess/sessions", "")
	var s apitype.Session
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	start := func(args ...string) (*exec.Cmd, *os.File, *os.File, *screen) {
		ptm, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ptm.Close(); tty.Close() })
		if err := pty.Setsize(ptm, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, append([]string{"session", "exec", "-t", s.ID, "--agent", "tess"}, args...)...)
		cmd.Env = append(os.Environ(), "SANDPIT_URL="+url, "TERM=xterm")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		scr := &screen{}
		go func() { _, _ = io.Copy(scr, ptm) }()
		return cmd, ptm, tty, scr
	}

	cmd, ptm, tty, scr := start("--", "bash", "--norc", "--noprofile", "-i")
	scr.waitFor(t, ptm, "mark-42", "echo mark-$((6*7))\r")
	if !rawMode(t, tty) {
		t.Errorf("the CLI's terminal is not in raw mode while the command runs")
	}
	scr.waitFor(t, ptm, "30 100", "stty size\r")
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	scr.waitFor(t, ptm, "40 120", "stty size\r")
	// Ctrl-C is a key for the command: it interrupts sleep, and bash and the CLI go on.
	if _, err := io.WriteString(ptm, "sleep 30\r"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := io.WriteString(ptm, "\x03"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	scr.waitFor(t, ptm, "after-2", "echo after-$((1+1))\r")
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("Ctrl-C did not interrupt sleep 30 (%s)", d)
	}
	if _, err := io.WriteString(ptm, "exit 3\r"); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 3 {
		t.Fatalf("the CLI ended with %v, want exit status 3 (the command's); the terminal shows:\n%q", err, scr.String())
	}
	if rawMode(t, tty) {
		t.Errorf("the CLI left its terminal in raw mode")
	}

	// Stopped (SIGTERM), the CLI hangs the command up and exits 130.
	cmd, ptm, _, scr = start("--", "sh", "-c", "echo ready; exec sleep 300")
	scr.waitFor(t, ptm, "ready", "")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 130 {
		t.Fatalf("the stopped CLI ended with %v, want 130; the terminal shows:\n%q", err, scr.String())
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status, body := httpCall(t, "GET", url+"/v1/agents/tess/sessions/"+s.ID+"/processes", "")
		var list apitype.ProcessList
		if status != 200 || json.Unmarshal(body, &list) != nil {
			t.Fatalf("processes: %d %s", status, body)
		}
		running := false
		for _, p := range list.Processes {
			if strings.Contains(p.Command, "sleep 300") {
				running = p.State == "running"
				// The executor names SIGHUP "signal 1", and says "hangup" in the reason.
				if !running && (p.End == nil || !strings.Contains(p.End.Reason, "hangup")) {
					t.Fatalf("the command ended %+v, want by SIGHUP", p.End)
				}
			}
		}
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command still runs 30 s after its CLI stopped: %s", body)
		}
	}
}
