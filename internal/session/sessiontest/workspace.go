package sessiontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// TestCommandRunsAsTheSessionsUser: a command runs as the session's user in its home, with
// nothing of the daemon's environment, its exit status, output and events kept apart; argv
// runs as it is, with stdin and the environment given; the session's environment reaches it
// under the command's own; it runs under a run's limits of processes and open files.
func (s *Suite) TestCommandRunsAsTheSessionsUser(t *testing.T) {
	sess := s.create(t, "wanda", func(r *sandbox.SessionRequest) { r.Env = map[string]string{"S": "session", "X": "session"} })
	res := run(t, sess, session.CommandRequest{Cmd: "echo out; echo err >&2; pwd; id -un; echo $HOME; env | grep -c SANDPIT_ ; exit 3", TimeoutMS: ms(time.Minute)})
	end := res.Process.End
	if end == nil || end.ExitCode != 3 || end.Outcome != sandbox.OutcomeError || res.Process.PID <= 0 {
		t.Fatalf("end %+v, pid %d", end, res.Process.PID)
	}
	if res.Stdout != "out\n/home/user\nuser\n/home/user\n0\n" || res.Stderr != "err\n" {
		t.Fatalf("stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	argv := run(t, sess, session.CommandRequest{Argv: []string{"printf", "%s|", "a b", "$HOME"}, Env: map[string]string{"X": "1"}, Stdin: []byte("in")})
	if argv.Stdout != "a b|$HOME|" {
		t.Fatalf("argv stdout %q", argv.Stdout)
	}
	in := run(t, sess, session.CommandRequest{Cmd: "cat; echo $X $S", Env: map[string]string{"X": "x1"}, Stdin: []byte("piped\n")})
	if in.Stdout != "piped\nx1 session\n" {
		t.Fatalf("stdin and environment: %q", in.Stdout)
	}
	// The login shell of cmd starts no id of its own (bash knows its euid; the image's
	// /etc/profile asks $EUID first): an exported function id (the home is noexec) records
	// each call the profile makes.
	login := run(t, sess, session.CommandRequest{Cmd: "echo $PATH; cat spy 2>/dev/null; true",
		Env: map[string]string{"BASH_FUNC_id%%": `() { echo ran >> /home/user/spy; command id "$@"; }`}})
	if strings.Contains(login.Stdout, "ran") || !strings.Contains(login.Stdout, "/usr/local/bin") || login.Stderr != "" {
		t.Fatalf("the login shell started id (or set no PATH): stdout %q, stderr %q", login.Stdout, login.Stderr)
	}
	// It runs under a run's limits of processes and open files (set before it ran).
	lim := s.svc.Config().Limits
	if got, want := run(t, sess, session.CommandRequest{Cmd: "ulimit -u; ulimit -n"}).Stdout, fmt.Sprintf("%d\n%d\n", lim.Processes, lim.OpenFiles); got != want {
		t.Fatalf("the command's limits of processes and open files: %q; want %q", got, want)
	}
	var events []string
	_, err := sess.Command(context.Background(), session.CommandRequest{Cmd: "echo a; echo b >&2"}, func(ev session.CommandEvent) {
		events = append(events, ev.Type)
	})
	if err != nil || events[0] != "start" || events[len(events)-1] != "end" || len(events) != 4 {
		t.Fatalf("events %v, %v", events, err)
	}
}

// TestFilesAndTheInterpreterShareTheHome: files written by a command, by the interpreter and by
// path are the same files; reads take ranges; writes replace whole; listing, mkdir, rename,
// stat and remove work by path and refuse what would lose data, each error naming its class.
func (s *Suite) TestFilesAndTheInterpreterShareTheHome(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	sh(t, sess, "mkdir -p data && printf 'a,b\\n1,2\\n' > data/in.csv")
	out := output(t, mustCall(t, sess, "import os\nOUTPUT = [os.getcwd(), open('data/in.csv').read()]\nopen('from_py.txt', 'w').write('py')"))
	if fmt.Sprint(out) != "[/home/user a,b\n1,2\n]" {
		t.Fatalf("the interpreter saw %v", out)
	}
	if got := sh(t, sess, "cat from_py.txt").Stdout; got != "py" {
		t.Fatalf("the command saw %q", got)
	}
	ent, err := sess.WriteFile(ctx, "/home/user/deep/er/f.txt", strings.NewReader("hello world"), true)
	if err != nil || ent.Path != "/home/user/deep/er/f.txt" || ent.SizeBytes != 11 || ent.Type != "file" {
		t.Fatalf("write: %+v, %v", ent, err)
	}
	if _, err := sess.WriteFile(ctx, "nodir/f.txt", strings.NewReader("x"), false); errclass.Of(err) != errclass.NotFound {
		t.Fatalf("write without parents: %v", err)
	}
	got, err := sess.ReadFile(ctx, "deep/er/f.txt", 6, 3)
	if err != nil || string(got.Content) != "wor" || got.Entry.SizeBytes != 11 {
		t.Fatalf("range read: %q %+v %v", got.Content, got.Entry, err)
	}
	got.Done()
	if _, err := sess.WriteFile(ctx, "deep/er/f.txt", strings.NewReader("replaced"), false); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sess, "cat deep/er/f.txt; find deep/er/f.txt -printf %u").Stdout; got != "replaceduser" {
		t.Fatalf("after overwrite the command saw %q", got)
	}
	list, err := sess.ListFiles(ctx, "deep", 2)
	if err != nil || len(list.Entries) != 2 || list.Entries[0].Path != "/home/user/deep/er" || list.Entries[1].Name != "f.txt" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := sess.MakeDir(ctx, "made/x", true); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.RenameFile(ctx, "deep/er/f.txt", "made/x/g.txt", false); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.RenameFile(ctx, "from_py.txt", "made/x/g.txt", false); errclass.Of(err) != errclass.Conflict {
		t.Fatalf("rename over an existing file without overwrite: %v", err)
	}
	st, err := sess.StatFile(ctx, "made/x/g.txt")
	if err != nil || st.SizeBytes != 8 {
		t.Fatalf("stat: %+v %v", st, err)
	}
	wantClass(t, "remove a full directory", sess.RemoveFile(ctx, "made", false), errclass.Conflict, "recursive")
	if err := sess.RemoveFile(ctx, "made", true); err != nil {
		t.Fatal(err)
	}
	_, err = sess.StatFile(ctx, "made")
	wantClass(t, "stat a removed directory", err, errclass.NotFound, "/home/user/made")
	_, err = sess.ReadFile(ctx, "deep", 0, 0)
	wantClass(t, "read a directory", err, errclass.Conflict, "is a directory")
	_, err = sess.ReadFile(ctx, "missing.txt", 0, 0)
	wantClass(t, "read a missing file", err, errclass.NotFound, "/home/user/missing.txt does not exist")
}

// TestH71PathsOutsideTheHome: .., /proc/self/root and absolute paths outside the home are
// refused for reads and writes (H71).
func (s *Suite) TestH71PathsOutsideTheHome(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	for _, p := range []string{"../../etc/passwd", "/etc/passwd", "/proc/self/root/etc/passwd", "/home/user/../user2/x", "a/../../x", "/home/userx"} {
		_, err := sess.ReadFile(ctx, p, 0, 0)
		wantClass(t, "read "+p, err, errclass.Invalid, "must lie under /home/user")
		_, err = sess.WriteFile(ctx, p, strings.NewReader("x"), true)
		wantClass(t, "write "+p, err, errclass.Invalid, "must lie under /home/user")
	}
}

// TestH72LinksAreNeverFollowed: symbolic links are never followed, and FIFOs and devices are
// refused by name, at once (H72).
func (s *Suite) TestH72LinksAreNeverFollowed(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	sh(t, sess, "ln -sf /etc/passwd plink; ln -sfn /tmp tlink; mkfifo fifo; ln -sf /dev/zero zlink")
	for _, p := range []string{"plink", "tlink/x", "zlink"} {
		_, err := sess.ReadFile(ctx, p, 0, 0)
		wantClass(t, "read "+p, err, errclass.Invalid, "symbolic link")
	}
	_, err := sess.WriteFile(ctx, "tlink/escaped", strings.NewReader("x"), false)
	wantClass(t, "write through a link", err, errclass.Invalid, "symbolic link")
	_, err = sess.WriteFile(ctx, "plink", strings.NewReader("x"), false)
	wantClass(t, "write over a link", err, errclass.Invalid, "symbolic link")
	began := time.Now()
	_, err = sess.ReadFile(ctx, "fifo", 0, 0)
	wantClass(t, "read a FIFO", err, errclass.Invalid, "FIFO")
	if time.Since(began) > 20*time.Second {
		t.Fatalf("reading a FIFO took %s", time.Since(began))
	}
	_, err = sess.WriteFile(ctx, "fifo", strings.NewReader("x"), false)
	wantClass(t, "write a FIFO", err, errclass.Invalid, "FIFO")
	list, err := sess.ListFiles(ctx, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range list.Entries {
		if ent.Name == "tlink" && (ent.Type != "symlink" || ent.Target != "/tmp") {
			t.Fatalf("the link is listed as %+v", ent)
		}
	}
}

// TestH73LinkSwappedDuringWrites: a directory swapped for a link to /tmp and back as fast as a
// command can, while the daemon writes into it, never takes a write out of the home (H73).
func (s *Suite) TestH73LinkSwappedDuringWrites(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	bg := run(t, sess, session.CommandRequest{Background: true, Cmd: "while true; do rm -rf d; mkdir d; rm -rf d; ln -s /tmp d; done"})
	for range 200 {
		_, _ = sess.WriteFile(ctx, "d/escaped", strings.NewReader("x"), false)
		if got, err := sess.ReadFile(ctx, "d/escaped", 0, 0); err == nil {
			got.Done()
		}
	}
	if err := sess.Signal(ctx, bg.Process.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sess, "ls /tmp 2>&1; true").Stdout; strings.Contains(got, "escaped") {
		t.Fatalf("a write followed the swapped link into /tmp: %q", got)
	}
}

// TestH70CommandPastItsTimeout: a command past its timeout is killed with everything it
// daemonised (setsid, double forks, nohup), while a background command and the interpreter
// live on; a background command ends on SIGTERM (H70).
func (s *Suite) TestH70CommandPastItsTimeout(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	keep := run(t, sess, session.CommandRequest{Background: true, Cmd: "exec sleep 1001"})
	// The timeout leaves room for the four starts under gVisor on a loaded machine: a
	// kill before "started" would prove nothing about what the command daemonised.
	res := run(t, sess, session.CommandRequest{TimeoutMS: ms(5 * time.Second),
		Cmd: "setsid bash -c 'sleep 1002 & disown' ; (bash -c 'sleep 1003 &' &) ; nohup sleep 1004 >/dev/null 2>&1 & echo started; sleep 1005"})
	if res.Process.End.Outcome != sandbox.OutcomeTimeout || res.Stdout != "started\n" {
		t.Fatalf("end %+v, stdout %q", res.Process.End, res.Stdout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := sh(t, sess, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").Stdout
		if !strings.Contains(ps, "sleep 1001") {
			t.Fatalf("the background command was killed too: %q", ps)
		}
		if !strings.Contains(ps, "sleep 1002") && !strings.Contains(ps, "sleep 1003") && !strings.Contains(ps, "sleep 1004") && !strings.Contains(ps, "sleep 1005") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the timed-out command are left: %q", ps)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mustCall(t, sess, "print('alive')")
	if err := sess.Signal(ctx, keep.Process.ID, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	info, err := sess.Wait(wctx, keep.Process.ID)
	if err != nil || info.End.Signal != "SIGTERM" || info.State != "ended" {
		t.Fatalf("after SIGTERM: %+v %v", info.End, err)
	}
}

// TestBackgroundProcesses: a background process takes input, streams its output to a client
// that attaches, ends when its stdin closes, and is waited for and listed; an ended or unknown
// process, or an unknown signal, is refused with its class.
func (s *Suite) TestBackgroundProcesses(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	bg := run(t, sess, session.CommandRequest{Background: true, Cmd: "while read -r l; do echo got:$l; done; echo bye"})
	if bg.Process.State != "running" || !sandbox.ValidProcessID(bg.Process.ID) {
		t.Fatalf("background: %+v", bg.Process)
	}
	var mu sync.Mutex
	var seen strings.Builder
	attached := make(chan error, 1)
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := make(chan struct{})
	go func() {
		_, err := sess.Attach(actx, bg.Process.ID, false, func(ev session.CommandEvent) {
			if ev.Type == "start" {
				close(started)
			}
			mu.Lock()
			seen.WriteString(ev.Data)
			mu.Unlock()
		})
		attached <- err
	}()
	<-started
	if err := sess.Input(ctx, bg.Process.ID, []byte("one\ntwo\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := sess.Input(ctx, bg.Process.ID, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := <-attached; err != nil {
		t.Fatal(err)
	}
	if got := seen.String(); got != "got:one\ngot:two\nbye\n" {
		t.Fatalf("attached output %q", got)
	}
	info, err := sess.Wait(actx, bg.Process.ID)
	if err != nil || info.End.ExitCode != 0 || info.End.Outcome != sandbox.OutcomeOK {
		t.Fatalf("wait: %+v %v", info.End, err)
	}
	list, err := sess.Processes(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("processes: %v %v", list, err)
	}
	wantClass(t, "signal an ended process", sess.Signal(ctx, bg.Process.ID, "SIGTERM"), errclass.Conflict, "has ended")
	wantClass(t, "signal an unknown process", sess.Signal(ctx, "pr_aaaaaaaaaaaaaaaaaaaaaaaaaa", "SIGTERM"), errclass.NotFound, "no process")
	wantClass(t, "an unknown signal", sess.Signal(ctx, bg.Process.ID, "SIGFOO"), errclass.Invalid, "SIGFOO")

	// A command that never reads its stdin: the write fails in time, and close still works.
	sleeper := run(t, sess, session.CommandRequest{Background: true, Cmd: "sleep 1000"})
	began := time.Now()
	err = sess.Input(ctx, sleeper.Process.ID, make([]byte, 256<<10), false) // 4 pipes' worth
	wantClass(t, "a write nobody reads", err, errclass.Conflict, "did not read its stdin")
	if d := time.Since(began); d > time.Minute {
		t.Fatalf("the write failed after %s", d)
	}
	if err := sess.Input(ctx, sleeper.Process.ID, nil, true); err != nil {
		t.Fatalf("closing the stdin after it: %v", err)
	}
	if err := sess.Signal(ctx, sleeper.Process.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
}

// TestTerminal: a command in a terminal has its size, is resized, and takes input.
func (s *Suite) TestTerminal(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	p := run(t, sess, session.CommandRequest{Background: true, Cmd: "bash --norc -i", PTY: &sandbox.TermSize{Rows: 24, Cols: 80}})
	var mu sync.Mutex
	var screen strings.Builder
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		info, err := sess.Attach(actx, p.Process.ID, true, func(ev session.CommandEvent) {
			mu.Lock()
			screen.WriteString(ev.Data)
			mu.Unlock()
		})
		if err == nil && (info.End == nil || info.End.Outcome != sandbox.OutcomeOK) {
			err = fmt.Errorf("the terminal's shell ended %+v", info.End)
		}
		done <- err
	}()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			got := screen.String()
			mu.Unlock()
			if strings.Contains(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q: %q", want, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := sess.Input(ctx, p.Process.ID, []byte("stty size; tty\n"), false); err != nil {
		t.Fatal(err)
	}
	waitFor("24 80")
	waitFor("/dev/pts/")
	if err := sess.Resize(ctx, p.Process.ID, sandbox.TermSize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	if err := sess.Input(ctx, p.Process.ID, []byte("stty size\nexit\n"), false); err != nil {
		t.Fatal(err)
	}
	waitFor("30 100")
	if err := <-done; err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%v; the terminal showed %q", err, screen.String())
	}
}

// TestH76CommandFloodingStdout: a command flooding stdout is stopped at the cap, and the
// session runs the next command (H76).
func (s *Suite) TestH76CommandFloodingStdout(t *testing.T) {
	sess := s.create(t, "wanda", nil)
	res := run(t, sess, session.CommandRequest{Cmd: "yes flood", TimeoutMS: ms(time.Minute)})
	if res.Process.End.Outcome != sandbox.OutcomeOutputLimit || !res.Process.End.StdoutTruncated || int64(len(res.Stdout)) > s.svc.Config().Limits.StdoutBytes {
		t.Fatalf("end %+v, %d bytes of stdout", res.Process.End, len(res.Stdout))
	}
	sh(t, sess, "true")
}

// TestH75WriteAgainstTheDiskCap: a 1 GiB write is refused at the session's disk cap, naming it,
// and leaves nothing behind; the next write works (H75).
func (s *Suite) TestH75WriteAgainstTheDiskCap(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	_, err := sess.WriteFile(ctx, "big.bin", io.LimitReader(zeros{}, 1<<30), false)
	wantClass(t, "a 1 GiB write", err, errclass.TooLarge, "run_dir_bytes")
	list, err := sess.ListFiles(ctx, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range list.Entries {
		if strings.Contains(ent.Name, "big.bin") || strings.HasPrefix(ent.Name, ".sandpit-") {
			t.Fatalf("a failed write left %+v", ent)
		}
	}
	if _, err := sess.WriteFile(ctx, "small.txt", bytes.NewReader([]byte("fits")), false); err != nil {
		t.Fatalf("a write after the full one: %v", err)
	}
}

// TestH74AnotherSessionsHome: one session's home is out of reach of another's commands and file
// reads, and another agent cannot reach the session at all (H74).
func (s *Suite) TestH74AnotherSessionsHome(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	other := s.create(t, "otto", nil)
	if _, err := sess.WriteFile(ctx, "secret.txt", strings.NewReader("wanda's"), false); err != nil {
		t.Fatal(err)
	}
	res := run(t, other, session.CommandRequest{Cmd: "cat /home/user/secret.txt; ls -a /home/user; cat /proc/*/root/home/user/secret.txt", TimeoutMS: ms(time.Minute)})
	if strings.Contains(res.Stdout, "wanda's") {
		t.Fatalf("otto read wanda's file: %q", res.Stdout)
	}
	_, err := other.ReadFile(ctx, "secret.txt", 0, 0)
	wantClass(t, "otto reads secret.txt", err, errclass.NotFound, "does not exist")
	if _, err := s.reg.Get(ctx, "otto", sess.ID()); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("otto looks up wanda's session: %v", err)
	}
}

// TestH77BackgroundProcessEndsWithItsSession: a background process that ignores SIGTERM and
// SIGHUP and starts a setsid child ends with its session, and its sandbox goes (H77).
func (s *Suite) TestH77BackgroundProcessEndsWithItsSession(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "wanda", nil)
	bg := run(t, sess, session.CommandRequest{Background: true, Cmd: "trap '' TERM HUP; setsid sleep 1006 & exec sleep 1007"})
	if _, err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Wait(ctx, bg.Process.ID); errclass.Of(err) != errclass.Gone {
		t.Fatalf("wait after the close: %v", err)
	}
	s.waitSandboxes(t, 0)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
