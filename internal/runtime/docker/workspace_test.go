package docker_test

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

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// The workspace conformance suite: a session's commands and files on the real engine, the
// hostile cases of docs/hostile-cases.md (H70 on) among them. It runs under runc
// (TestWorkspace) and gVisor (TestWorkspaceRunsc).

func TestWorkspace(t *testing.T) {
	workspaceSuite(t, startSessions(t, engine.SessionConfig{MaxPerAgent: 2, MaxTotal: 3}))
}

func TestWorkspaceRunsc(t *testing.T) {
	name := testenv.ContainerRuntime(t, "runsc")
	workspaceSuite(t, startSessions(t, engine.SessionConfig{MaxPerAgent: 2, MaxTotal: 3}, func(c *docker.Config) { c.Box.Runtime = name }))
}

func ms(d time.Duration) *int64 { v := d.Milliseconds(); return &v }

// run runs a foreground command and returns its whole answer.
func (e *sessionEnv) run(t *testing.T, agent, id string, req engine.CommandRequest) engine.CommandResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := e.m.Command(ctx, agent, id, req, nil)
	if err != nil {
		t.Fatalf("command %q %q: %v", req.Cmd, req.Argv, err)
	}
	return res
}

func (e *sessionEnv) sh(t *testing.T, agent, id, cmd string) engine.CommandResult {
	t.Helper()
	res := e.run(t, agent, id, engine.CommandRequest{Cmd: cmd, TimeoutMS: ms(time.Minute)})
	if res.Process.End == nil || res.Process.End.Outcome != sandbox.OutcomeOK {
		t.Fatalf("command %q: %+v; stdout %q, stderr %q", cmd, res.Process.End, res.Stdout, res.Stderr)
	}
	return res
}

func wantClass(t *testing.T, what string, err, class error, contains string) {
	t.Helper()
	if err == nil || errclass.Of(err) != class || !strings.Contains(err.Error(), contains) {
		t.Fatalf("%s: got %v (class %v), want class %v mentioning %q", what, err, errclass.Of(err), class, contains)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func workspaceSuite(t *testing.T, e *sessionEnv) {
	ctx := context.Background()
	s := e.create(t, "wanda", nil)
	id := s.ID

	t.Run("a command runs as the session's user in its home, with nothing of the daemon's environment", func(t *testing.T) {
		res := e.run(t, "wanda", id, engine.CommandRequest{Cmd: "echo out; echo err >&2; pwd; id -un; echo $HOME; env | grep -c SANDPIT_ ; exit 3", TimeoutMS: ms(time.Minute)})
		end := res.Process.End
		if end == nil || end.ExitCode != 3 || end.Outcome != sandbox.OutcomeError || res.Process.PID <= 0 {
			t.Fatalf("end %+v, pid %d", end, res.Process.PID)
		}
		if res.Stdout != "out\n/home/user\nuser\n/home/user\n0\n" || res.Stderr != "err\n" {
			t.Fatalf("stdout %q, stderr %q", res.Stdout, res.Stderr)
		}
		argv := e.run(t, "wanda", id, engine.CommandRequest{Argv: []string{"printf", "%s|", "a b", "$HOME"}, Env: map[string]string{"X": "1"}, Stdin: []byte("in")})
		if argv.Stdout != "a b|$HOME|" {
			t.Fatalf("argv stdout %q", argv.Stdout)
		}
		in := e.run(t, "wanda", id, engine.CommandRequest{Cmd: "cat; echo $X", Env: map[string]string{"X": "x1"}, Stdin: []byte("piped\n")})
		if in.Stdout != "piped\nx1\n" {
			t.Fatalf("stdin: %q", in.Stdout)
		}
		var events []string
		_, err := e.m.Command(ctx, "wanda", id, engine.CommandRequest{Cmd: "echo a; echo b >&2"}, func(ev engine.CommandEvent) {
			events = append(events, ev.Type)
		})
		if err != nil || events[0] != "start" || events[len(events)-1] != "end" || len(events) != 4 {
			t.Fatalf("events %v, %v", events, err)
		}
	})

	t.Run("files and the interpreter share the home", func(t *testing.T) {
		e.sh(t, "wanda", id, "mkdir -p data && printf 'a,b\\n1,2\\n' > data/in.csv")
		out := output(t, e.mustCall(t, "wanda", id, "import os\nOUTPUT = [os.getcwd(), open('data/in.csv').read()]\nopen('from_py.txt', 'w').write('py')"))
		if fmt.Sprint(out) != "[/home/user a,b\n1,2\n]" {
			t.Fatalf("the interpreter saw %v", out)
		}
		if got := e.sh(t, "wanda", id, "cat from_py.txt").Stdout; got != "py" {
			t.Fatalf("the command saw %q", got)
		}
		ent, err := e.m.WriteFile(ctx, "wanda", id, "/home/user/deep/er/f.txt", strings.NewReader("hello world"), true)
		if err != nil || ent.Path != "/home/user/deep/er/f.txt" || ent.SizeBytes != 11 || ent.Type != "file" {
			t.Fatalf("write: %+v, %v", ent, err)
		}
		if _, err := e.m.WriteFile(ctx, "wanda", id, "nodir/f.txt", strings.NewReader("x"), false); errclass.Of(err) != errclass.NotFound {
			t.Fatalf("write without parents: %v", err)
		}
		got, err := e.m.ReadFile(ctx, "wanda", id, "deep/er/f.txt", 6, 3)
		if err != nil || string(got.Content) != "wor" || got.Entry.SizeBytes != 11 {
			t.Fatalf("range read: %q %+v %v", got.Content, got.Entry, err)
		}
		if _, err := e.m.WriteFile(ctx, "wanda", id, "deep/er/f.txt", strings.NewReader("replaced"), false); err != nil {
			t.Fatal(err)
		}
		if got := e.sh(t, "wanda", id, "cat deep/er/f.txt; find deep/er/f.txt -printf %u").Stdout; got != "replaceduser" {
			t.Fatalf("after overwrite the command saw %q", got)
		}
		list, err := e.m.ListFiles(ctx, "wanda", id, "deep", 2)
		if err != nil || len(list.Entries) != 2 || list.Entries[0].Path != "/home/user/deep/er" || list.Entries[1].Name != "f.txt" {
			t.Fatalf("list: %+v, %v", list, err)
		}
		if _, err := e.m.MakeDir(ctx, "wanda", id, "made/x", true); err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.RenameFile(ctx, "wanda", id, "deep/er/f.txt", "made/x/g.txt", false); err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.RenameFile(ctx, "wanda", id, "from_py.txt", "made/x/g.txt", false); errclass.Of(err) != errclass.Conflict {
			t.Fatalf("rename over an existing file without overwrite: %v", err)
		}
		st, err := e.m.StatFile(ctx, "wanda", id, "made/x/g.txt")
		if err != nil || st.SizeBytes != 8 {
			t.Fatalf("stat: %+v %v", st, err)
		}
		wantClass(t, "remove a full directory", e.m.RemoveFile(ctx, "wanda", id, "made", false), errclass.Conflict, "recursive")
		if err := e.m.RemoveFile(ctx, "wanda", id, "made", true); err != nil {
			t.Fatal(err)
		}
		_, err = e.m.StatFile(ctx, "wanda", id, "made")
		wantClass(t, "stat a removed directory", err, errclass.NotFound, "/home/user/made")
		_, err = e.m.ReadFile(ctx, "wanda", id, "deep", 0, 0)
		wantClass(t, "read a directory", err, errclass.Conflict, "is a directory")
		_, err = e.m.ReadFile(ctx, "wanda", id, "missing.txt", 0, 0)
		wantClass(t, "read a missing file", err, errclass.NotFound, "/home/user/missing.txt does not exist")
	})

	t.Run("H71 paths outside the home: .., /proc/self/root, absolute paths", func(t *testing.T) {
		for _, p := range []string{"../../etc/passwd", "/etc/passwd", "/proc/self/root/etc/passwd", "/home/user/../user2/x", "a/../../x", "/home/userx"} {
			_, err := e.m.ReadFile(ctx, "wanda", id, p, 0, 0)
			wantClass(t, "read "+p, err, errclass.Invalid, "must lie under /home/user")
			_, err = e.m.WriteFile(ctx, "wanda", id, p, strings.NewReader("x"), true)
			wantClass(t, "write "+p, err, errclass.Invalid, "must lie under /home/user")
		}
	})

	t.Run("H72 links are never followed, FIFOs and devices are refused by name", func(t *testing.T) {
		e.sh(t, "wanda", id, "ln -sf /etc/passwd plink; ln -sfn /tmp tlink; mkfifo fifo; ln -sf /dev/zero zlink")
		for _, p := range []string{"plink", "tlink/x", "zlink"} {
			_, err := e.m.ReadFile(ctx, "wanda", id, p, 0, 0)
			wantClass(t, "read "+p, err, errclass.Invalid, "symbolic link")
		}
		_, err := e.m.WriteFile(ctx, "wanda", id, "tlink/escaped", strings.NewReader("x"), false)
		wantClass(t, "write through a link", err, errclass.Invalid, "symbolic link")
		_, err = e.m.WriteFile(ctx, "wanda", id, "plink", strings.NewReader("x"), false)
		wantClass(t, "write over a link", err, errclass.Invalid, "symbolic link")
		began := time.Now()
		_, err = e.m.ReadFile(ctx, "wanda", id, "fifo", 0, 0)
		wantClass(t, "read a FIFO", err, errclass.Invalid, "FIFO")
		if time.Since(began) > 20*time.Second {
			t.Fatalf("reading a FIFO took %s", time.Since(began))
		}
		_, err = e.m.WriteFile(ctx, "wanda", id, "fifo", strings.NewReader("x"), false)
		wantClass(t, "write a FIFO", err, errclass.Invalid, "FIFO")
		list, err := e.m.ListFiles(ctx, "wanda", id, "", 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range list.Entries {
			if ent.Name == "tlink" && (ent.Type != "symlink" || ent.Target != "/tmp") {
				t.Fatalf("the link is listed as %+v", ent)
			}
		}
		e.sh(t, "wanda", id, "rm -f plink tlink fifo zlink")
	})

	t.Run("H73 a link swapped in during writes never takes one out of the home", func(t *testing.T) {
		// A background loop turns d from a directory into a link to /tmp and back, as fast
		// as it can, while the daemon writes d/escaped: no write may land in /tmp.
		bg := e.run(t, "wanda", id, engine.CommandRequest{Background: true,
			Cmd: "while true; do rm -rf d; mkdir d; rm -rf d; ln -s /tmp d; done"})
		for i := 0; i < 200; i++ {
			_, _ = e.m.WriteFile(ctx, "wanda", id, "d/escaped", strings.NewReader("x"), false)
			_, _ = e.m.ReadFile(ctx, "wanda", id, "d/escaped", 0, 0)
		}
		if err := e.m.Signal(ctx, "wanda", id, bg.Process.ID, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		if got := e.sh(t, "wanda", id, "ls /tmp; rm -rf d").Stdout; strings.Contains(got, "escaped") {
			t.Fatalf("a write followed the swapped link into /tmp: %q", got)
		}
	})

	t.Run("H70 a command past its timeout is killed with what it daemonised", func(t *testing.T) {
		keep := e.run(t, "wanda", id, engine.CommandRequest{Background: true, Cmd: "exec sleep 1001"})
		res := e.run(t, "wanda", id, engine.CommandRequest{TimeoutMS: ms(2 * time.Second),
			Cmd: "setsid bash -c 'sleep 1002 & disown' ; (bash -c 'sleep 1003 &' &) ; nohup sleep 1004 >/dev/null 2>&1 & echo started; sleep 1005"})
		if res.Process.End.Outcome != sandbox.OutcomeTimeout || res.Stdout != "started\n" {
			t.Fatalf("end %+v, stdout %q", res.Process.End, res.Stdout)
		}
		// What it started is gone; the background command and the interpreter live on.
		deadline := time.Now().Add(10 * time.Second)
		for {
			ps := e.sh(t, "wanda", id, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").Stdout
			if !strings.Contains(ps, "sleep 1001") {
				t.Fatalf("the background command was killed too: %q", ps)
			}
			left := strings.Contains(ps, "sleep 1002") || strings.Contains(ps, "sleep 1003") || strings.Contains(ps, "sleep 1004") || strings.Contains(ps, "sleep 1005")
			if !left {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes of the timed-out command are left: %q", ps)
			}
			time.Sleep(200 * time.Millisecond)
		}
		e.mustCall(t, "wanda", id, "print('alive')")
		if err := e.m.Signal(ctx, "wanda", id, keep.Process.ID, "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		info, err := e.m.Wait(wctx, "wanda", id, keep.Process.ID)
		if err != nil || info.End.Signal != "SIGTERM" || info.State != "ended" {
			t.Fatalf("after SIGTERM: %+v %v", info.End, err)
		}
	})

	t.Run("background processes: input, attach, close stdin, signals, wait", func(t *testing.T) {
		bg := e.run(t, "wanda", id, engine.CommandRequest{Background: true, Cmd: "while read -r l; do echo got:$l; done; echo bye"})
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
			_, err := e.m.Attach(actx, "wanda", id, bg.Process.ID, false, func(ev engine.CommandEvent) {
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
		if err := e.m.Input(ctx, "wanda", id, bg.Process.ID, []byte("one\ntwo\n"), false); err != nil {
			t.Fatal(err)
		}
		if err := e.m.Input(ctx, "wanda", id, bg.Process.ID, nil, true); err != nil {
			t.Fatal(err)
		}
		if err := <-attached; err != nil {
			t.Fatal(err)
		}
		if got := seen.String(); got != "got:one\ngot:two\nbye\n" {
			t.Fatalf("attached output %q", got)
		}
		info, err := e.m.Wait(actx, "wanda", id, bg.Process.ID)
		if err != nil || info.End.ExitCode != 0 || info.End.Outcome != sandbox.OutcomeOK {
			t.Fatalf("wait: %+v %v", info.End, err)
		}
		list, err := e.m.Processes(ctx, "wanda", id)
		if err != nil || len(list) == 0 {
			t.Fatalf("processes: %v %v", list, err)
		}
		wantClass(t, "signal an ended process", e.m.Signal(ctx, "wanda", id, bg.Process.ID, "SIGTERM"), errclass.Conflict, "has ended")
		wantClass(t, "signal an unknown process", e.m.Signal(ctx, "wanda", id, "pr_aaaaaaaaaaaaaaaaaaaaaaaaaa", "SIGTERM"), errclass.NotFound, "no process")
		wantClass(t, "an unknown signal", e.m.Signal(ctx, "wanda", id, bg.Process.ID, "SIGFOO"), errclass.Invalid, "SIGFOO")
	})

	t.Run("stdin of a command that never reads it: the write fails in time, and close still works", func(t *testing.T) {
		bg := e.run(t, "wanda", id, engine.CommandRequest{Background: true, Cmd: "sleep 1000"})
		start := time.Now()
		err := e.m.Input(ctx, "wanda", id, bg.Process.ID, make([]byte, 256<<10), false) // 4 pipes' worth
		wantClass(t, "a write nobody reads", err, errclass.Conflict, "did not read its stdin")
		if d := time.Since(start); d > time.Minute {
			t.Fatalf("the write failed after %s", d)
		}
		if err := e.m.Input(ctx, "wanda", id, bg.Process.ID, nil, true); err != nil {
			t.Fatalf("closing the stdin after it: %v", err)
		}
		if err := e.m.Signal(ctx, "wanda", id, bg.Process.ID, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a terminal: size, resize, input", func(t *testing.T) {
		p := e.run(t, "wanda", id, engine.CommandRequest{Background: true, Cmd: "bash --norc -i", PTY: &sandbox.TermSize{Rows: 24, Cols: 80}})
		var mu sync.Mutex
		var screen strings.Builder
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			info, err := e.m.Attach(actx, "wanda", id, p.Process.ID, true, func(ev engine.CommandEvent) {
				mu.Lock()
				screen.WriteString(ev.Data)
				mu.Unlock()
			})
			if err == nil && (info.End == nil || info.End.Outcome != sandbox.OutcomeOK) {
				err = fmt.Errorf("the terminal's shell ended %+v", info.End)
			}
			done <- err
		}()
		waitFor := func(s string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				got := screen.String()
				mu.Unlock()
				if strings.Contains(got, s) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the terminal never showed %q: %q", s, got)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if err := e.m.Input(ctx, "wanda", id, p.Process.ID, []byte("stty size; tty\n"), false); err != nil {
			t.Fatal(err)
		}
		waitFor("24 80")
		waitFor("/dev/pts/")
		if err := e.m.Resize(ctx, "wanda", id, p.Process.ID, sandbox.TermSize{Rows: 30, Cols: 100}); err != nil {
			t.Fatal(err)
		}
		if err := e.m.Input(ctx, "wanda", id, p.Process.ID, []byte("stty size\nexit\n"), false); err != nil {
			t.Fatal(err)
		}
		waitFor("30 100")
		if err := <-done; err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%v; the terminal showed %q", err, screen.String())
		}
	})

	t.Run("H76 a command flooding stdout is stopped at the cap", func(t *testing.T) {
		res := e.run(t, "wanda", id, engine.CommandRequest{Cmd: "yes flood", TimeoutMS: ms(time.Minute)})
		if res.Process.End.Outcome != sandbox.OutcomeOutputLimit || !res.Process.End.StdoutTruncated || int64(len(res.Stdout)) > e.svc.Config().Limits.StdoutBytes {
			t.Fatalf("end %+v, %d bytes of stdout", res.Process.End, len(res.Stdout))
		}
		e.sh(t, "wanda", id, "true")
	})

	t.Run("H75 a 1 GiB write against the disk cap", func(t *testing.T) {
		_, err := e.m.WriteFile(ctx, "wanda", id, "big.bin", io.LimitReader(zeros{}, 1<<30), false)
		wantClass(t, "a 1 GiB write", err, errclass.TooLarge, "run_dir_bytes")
		list, err := e.m.ListFiles(ctx, "wanda", id, "", 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range list.Entries {
			if strings.Contains(ent.Name, "big.bin") || strings.HasPrefix(ent.Name, ".sandpit-") {
				t.Fatalf("a failed write left %+v", ent)
			}
		}
		if _, err := e.m.WriteFile(ctx, "wanda", id, "small.txt", bytes.NewReader([]byte("fits")), false); err != nil {
			t.Fatalf("a write after the full one: %v", err)
		}
	})

	t.Run("H74 another session's home is out of reach", func(t *testing.T) {
		other := e.create(t, "otto", nil)
		if _, err := e.m.WriteFile(ctx, "wanda", id, "secret.txt", strings.NewReader("wanda's"), false); err != nil {
			t.Fatal(err)
		}
		res := e.run(t, "otto", other.ID, engine.CommandRequest{Cmd: "cat /home/user/secret.txt; ls -a /home/user; cat /proc/*/root/home/user/secret.txt", TimeoutMS: ms(time.Minute)})
		if strings.Contains(res.Stdout, "wanda's") {
			t.Fatalf("otto read wanda's file: %q", res.Stdout)
		}
		_, err := e.m.ReadFile(ctx, "otto", other.ID, "secret.txt", 0, 0)
		wantClass(t, "otto reads secret.txt", err, errclass.NotFound, "does not exist")
		_, err = e.m.ReadFile(ctx, "otto", id, "secret.txt", 0, 0)
		if !errors.Is(err, sandbox.ErrSessionNotFound) {
			t.Fatalf("otto reads wanda's session: %v", err)
		}
	})

	t.Run("H77 a background process ends with its session", func(t *testing.T) {
		s2 := e.create(t, "wanda", nil)
		bg := e.run(t, "wanda", s2.ID, engine.CommandRequest{Background: true, Cmd: "trap '' TERM HUP; setsid sleep 1006 & exec sleep 1007"})
		if _, err := e.m.Close(ctx, "wanda", s2.ID); err != nil {
			t.Fatal(err)
		}
		_, err := e.m.Wait(ctx, "wanda", s2.ID, bg.Process.ID)
		if errclass.Of(err) != errclass.Gone {
			t.Fatalf("wait after the close: %v", err)
		}
		e.waitContainers(t, 2) // wanda's first session and otto's
	})
}

// TestWorkspacePipInstall: under network "allowlist", a session created with dependencies
// installs them from a custom index_url with its trusted_hosts, as one-shot runs do (before,
// the session's install had no dialer and every connection pip opened was refused), and
// `pip install` in a command installs into the session's own site directory, through the same
// index, importable in the interpreter's next call.
func TestWorkspacePipInstall(t *testing.T) {
	idx := pyindex.New(t)
	idx.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	idx.AddWheel("otherpkg", "2.0", `VALUE = "2.0"`)
	rt, _ := startRuntime(t, func(cfg *docker.Config) {
		cfg.Slots, cfg.Box.Network, cfg.ForkServer.Enabled = 1, "allowlist", false
		cfg.Pip = protocol.PipOptions{IndexURL: idx.URL(), TrustedHosts: []string{idx.Host()}}
	})
	allow, err := egress.New(egress.Config{IndexURLs: []string{idx.URL()}, Limits: egress.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	svcCfg := engine.DefaultConfig()
	svcCfg.Slots = 1
	svc := engine.NewService(rt, engine.Hooks{Egress: allow}, svcCfg, testenv.Logger())
	m := engine.NewSessions(svc, rt, nil, engine.DefaultSessionConfig(), testenv.Logger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m.Shutdown(ctx)
	})
	e := &sessionEnv{rt: rt, svc: svc, m: m}
	s := e.create(t, "pia", func(r *sandbox.SessionRequest) { r.Dependencies = []string{"tinypkg==1.0"} })
	if len(s.Dependencies) != 1 || s.Dependencies[0].Status == sandbox.DependencyFailed {
		t.Fatalf("the session's dependencies: %+v", s.Dependencies)
	}
	if got := output(t, e.mustCall(t, "pia", s.ID, "import tinypkg\nOUTPUT = tinypkg.VALUE")); got != "1.0" {
		t.Fatalf("tinypkg: %v", got)
	}
	res := e.run(t, "pia", s.ID, engine.CommandRequest{Cmd: "pip install otherpkg==2.0", TimeoutMS: ms(2 * time.Minute)})
	if res.Process.End.Outcome != sandbox.OutcomeOK {
		t.Fatalf("pip install: %+v\n%s\n%s", res.Process.End, res.Stdout, res.Stderr)
	}
	if got := output(t, e.mustCall(t, "pia", s.ID, "import otherpkg\nOUTPUT = [otherpkg.VALUE, otherpkg.__file__]")); fmt.Sprint(got) != "[2.0 /home/user/.local/lib/python3.11/site-packages/otherpkg/__init__.py]" {
		t.Fatalf("otherpkg in the interpreter: %v", got)
	}
	if got := e.sh(t, "pia", s.ID, "python3 -c 'import otherpkg; print(otherpkg.VALUE)'").Stdout; got != "2.0\n" {
		t.Fatalf("otherpkg in a command: %q", got)
	}
}
