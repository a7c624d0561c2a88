package kubernetes_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// sessionEnv is a one-slot runtime with sessions over it. Its control lines keep the default
// heartbeat: a shorter one (the Docker tests' 2 s) ended a session whose pod was only slow
// under CI's load, and nothing here waits on a heartbeat to see a pod go.
type sessionEnv struct {
	*env
	rt *kubernetes.Runtime
	m  *engine.Sessions
}

func startSessions(t *testing.T, e *env, daemon string, scfg engine.SessionConfig, mutate func(*kubernetes.Config)) *sessionEnv {
	t.Helper()
	rt := e.start(t, e.config(daemon), func(c *kubernetes.Config) {
		c.Slots = 1
		if mutate != nil {
			mutate(c)
		}
	})
	d := engine.DefaultSessionConfig()
	scfg.IdleTimeout, scfg.MaxLifetime = d.IdleTimeout, d.MaxLifetime
	scfg.MaxPerAgent, scfg.MaxTotal = max(scfg.MaxPerAgent, d.MaxPerAgent), max(scfg.MaxTotal, d.MaxTotal)
	svcCfg := engine.DefaultConfig()
	svcCfg.Slots = 1
	svc := engine.NewService(rt, engine.Hooks{}, svcCfg, testenv.Logger())
	m := engine.NewSessions(svc, rt, nil, scfg, testenv.Logger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m.Shutdown(ctx)
	})
	return &sessionEnv{env: e, rt: rt, m: m}
}

func (e *sessionEnv) create(t *testing.T, agent string) sandbox.SessionInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := e.m.Create(ctx, sandbox.SessionRequest{Agent: agent})
	if err != nil {
		t.Fatalf("creating a session: %v", err)
	}
	t.Cleanup(func() { _, _ = e.m.Close(context.Background(), info.Agent, info.ID) })
	return info
}

func (e *sessionEnv) call(agent, id, code string) (sandbox.Result, error) {
	ms := int64(30_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.m.Execute(ctx, id, sandbox.Request{Agent: agent, Code: code, TimeoutMS: &ms}, true, nil)
}

func (e *sessionEnv) mustCall(t *testing.T, agent, id, code string) any {
	t.Helper()
	res, err := e.call(agent, id, code)
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("call %q: outcome %s (%s); stderr: %s", code, res.Outcome, res.Reason, res.Stderr)
	}
	var v any
	if len(res.Output) > 0 {
		if err := json.Unmarshal(res.Output, &v); err != nil {
			t.Fatalf("OUTPUT %s: %v", res.Output, err)
		}
	}
	return v
}

func (e *sessionEnv) sh(t *testing.T, agent, id, cmd string) engine.CommandResult {
	t.Helper()
	ms := int64(60_000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := e.m.Command(ctx, agent, id, engine.CommandRequest{Cmd: cmd, TimeoutMS: &ms}, nil)
	if err != nil {
		t.Fatalf("command %q: %v", cmd, err)
	}
	return res
}

// claimedPods counts the session pods this runtime has claimed.
func (e *sessionEnv) claimedPods(t *testing.T) int {
	t.Helper()
	names, err := e.rt.SessionPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

const writeFiles = `import hashlib, os
data = os.urandom(8 << 20)
open("big.bin", "wb").write(data)
open("mymod.py", "w").write("VALUE = 7\n")
os.makedirs(os.path.expanduser("~/.config/app"), exist_ok=True)
open(os.path.expanduser("~/.config/app/settings"), "w").write("kept")
g = 42
OUTPUT = hashlib.sha256(data).hexdigest()`

const readFiles = `import hashlib, os
OUTPUT = [hashlib.sha256(open("big.bin", "rb").read()).hexdigest(), open(os.path.expanduser("~/.config/app/settings")).read(),
    "g" in globals(), sorted(os.listdir("."))]`

// TestSessionsKubernetes: sessions on pods from the warm pool keep their interpreter across
// calls, run commands as the session's user in its home beside the interpreter's files,
// cannot pause (the error says why and that hibernate works), hibernate (their pod goes) and
// resume with their files in a new pod, fork from a hibernated one, and give their pod back
// on close.
func TestSessionsKubernetes(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	scfg := engine.SessionConfig{Lifecycle: engine.LifecycleConfig{Dir: dir, SessionMemoryBytes: 1 << 30, PausedMaxBytes: 8 << 30,
		HibernatedPerAgent: 4, HibernatedMaxBytes: 1 << 30}}
	se := startSessions(t, e, "sess", scfg, func(c *kubernetes.Config) { c.WarmSessions = 2 })
	waitFor(t, 3*time.Minute, "2 warm session pods", func() bool {
		w, _ := se.rt.WarmSessionPods(context.Background())
		return len(w) == 2
	})
	ctx := context.Background()
	s := se.create(t, "pat")
	if got := se.mustCall(t, "pat", s.ID, "x = 41\nOUTPUT = x + 1"); got != float64(42) {
		t.Fatalf("first call: %v", got)
	}
	if got := se.mustCall(t, "pat", s.ID, "OUTPUT = x"); got != float64(41) {
		t.Fatalf("the interpreter did not keep x: %v", got)
	}

	res := se.sh(t, "pat", s.ID, "echo out; pwd; id -un; echo $HOME; exit 3")
	if end := res.Process.End; end == nil || end.ExitCode != 3 || res.Stdout != "out\n/home/user\nuser\n/home/user\n" {
		t.Fatalf("command: %+v, stdout %q, stderr %q", res.Process.End, res.Stdout, res.Stderr)
	}
	se.sh(t, "pat", s.ID, "mkdir -p data && printf 'a,b' > data/in.csv")
	if got := se.mustCall(t, "pat", s.ID, "OUTPUT = open('data/in.csv').read()"); got != "a,b" {
		t.Fatalf("the interpreter saw %v", got)
	}
	if _, err := se.m.WriteFile(ctx, "pat", s.ID, "/home/user/deep/f.txt", strings.NewReader("hello world"), true); err != nil {
		t.Fatal(err)
	}
	got, err := se.m.ReadFile(ctx, "pat", s.ID, "deep/f.txt", 6, 5)
	if err != nil || string(got.Content) != "world" {
		t.Fatalf("read: %q, %v", got.Content, err)
	}

	_, err = se.m.Pause(ctx, "pat", s.ID)
	if errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), "kubernetes") || !strings.Contains(err.Error(), "hibernate") {
		t.Fatalf("pause: %v (want an invalid request naming kubernetes and hibernate)", err)
	}

	sum := se.mustCall(t, "pat", s.ID, writeFiles).(string)
	began := time.Now()
	info, err := se.m.Hibernate(ctx, "pat", s.ID)
	if err != nil || info.State != sandbox.SessionHibernated {
		t.Fatalf("hibernate: %+v, %v", info, err)
	}
	t.Logf("hibernate of %d bytes: %s", info.Hibernation.Bytes, time.Since(began))
	waitFor(t, time.Minute, "the hibernated session's pod to go", func() bool { return se.claimedPods(t) == 0 })
	if _, err := os.Stat(filepath.Join(dir, s.ID+".tar")); err != nil {
		t.Fatal(err)
	}
	fork, err := se.m.Fork(ctx, "pat", s.ID)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() { _, _ = se.m.Close(context.Background(), "pat", fork.ID) })

	began = time.Now()
	info, err = se.m.Resume(ctx, "pat", s.ID)
	if err != nil || info.Memory != sandbox.MemoryLost {
		t.Fatalf("resume from hibernation: %+v, %v", info, err)
	}
	back := se.mustCall(t, "pat", s.ID, readFiles).([]any)
	t.Logf("resume from hibernation to the first answered call: %s", time.Since(began))
	if back[0] != sum || back[1] != "kept" || back[2] != false {
		t.Fatalf("after the resume: %v (want the big file's sum %s, the home's file, no g)", back, sum)
	}
	if got := se.mustCall(t, "pat", s.ID, "import mymod\nOUTPUT = mymod.VALUE"); got != float64(7) {
		t.Fatalf("a module of the session's directory: %v", got)
	}
	se.mustCall(t, "pat", fork.ID, `open("big.bin", "wb").write(b"fork's own")`)
	if got := se.mustCall(t, "pat", s.ID, readFiles).([]any); got[0] != sum {
		t.Fatalf("a fork's write reached its source: %v", got)
	}
	if _, err := se.m.Close(ctx, "pat", fork.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := se.m.Close(ctx, "pat", s.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "every session pod to go", func() bool { return se.claimedPods(t) == 0 })
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		t.Fatalf("hibernation files left: %v", names)
	}
}
