// Package sessiontest is the conformance suite of sessions: every runtime that opens
// sessions' sandboxes (sandbox.SessionOpener: Docker under runc and gVisor, Kubernetes under
// runc and gVisor) passes it, driven through the session registry as the daemon's doors drive
// it. Its cases are a session's calls (state kept, interrupts, kills, the queue, the caps,
// expiry, a sandbox lost), its workspace (commands, background processes, a terminal, files by
// path) with the hostile cases of docs/hostile-cases.md that a session decides (H70–H77), its
// ports (servers it runs, reached through DialPort), and its lifecycle (pause, hibernate,
// resume, fork).
//
// The form is sandbox/sandboxtest's (restic's backend suite): a type, Suite, with one method
// per case named Test…, found by reflection and run as a subtest named without "Test", in name
// order; a case makes the sessions it needs and leaves none behind.
package sessiontest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// Runtime is a runtime under test: its slots run one-shot executions, and it opens sessions'
// sandboxes.
type Runtime interface {
	sandbox.Runtime
	sandbox.SessionOpener
}

// Harness is what the suite needs from a runtime under test.
type Harness struct {
	// Runtime is the runtime under test, ready, with at least one slot.
	Runtime Runtime
	// Sandboxes counts the runtime's session sandboxes now (containers, pods).
	Sandboxes func(ctx context.Context) (int, error)
	// Kill stops session id's sandbox from outside, as a crash or an operator would.
	Kill func(ctx context.Context, id string) error
	// Frozen reports whether the runtime's engine says session id's sandbox is frozen; nil
	// when the runtime cannot pause (its pause must then be refused, naming hibernate).
	Frozen func(ctx context.Context, id string) (bool, error)
	// HeartbeatTimeout is how long the runtime's control line lets the executor leave pings
	// unanswered (control.Options): a paused session's line must outlive it.
	HeartbeatTimeout time.Duration
	// Slow is true under a user-space kernel (gVisor): calls that fill memory or start many
	// processes get more time.
	Slow bool
	// Sparse is true when the sandbox's file system reports a sparse file's holes (SEEK_HOLE),
	// so that a hibernation keeps it sparse; gVisor's do not.
	Sparse bool
}

// Suite is the session conformance suite for one runtime.
type Suite struct {
	Harness
	svc *engine.Service
	reg *session.Registry
	dir string // hibernation files
}

// Config is the sessions' configuration the suite runs with: 2 per agent, 3 in all, pauses
// and hibernations on (files in dir).
func Config(dir string) session.Config {
	cfg := session.DefaultConfig()
	cfg.MaxPerAgent, cfg.MaxTotal = 2, 3
	cfg.Lifecycle = session.LifecycleConfig{Dir: dir, SessionMemoryBytes: 1 << 30, PausedMaxBytes: 8 << 30,
		HibernatedPerAgent: 4, HibernatedMaxBytes: 1 << 30}
	return cfg
}

// Run runs every case of the suite against h, each as a subtest of t, over a registry of
// sessions made for it (see Config) and shut down at the end.
func Run(t *testing.T, h Harness, log *slog.Logger) {
	t.Helper()
	svcCfg := engine.DefaultConfig()
	svcCfg.Slots = 1
	s := &Suite{Harness: h, dir: t.TempDir()}
	s.svc = engine.NewService(h.Runtime, engine.Hooks{}, svcCfg, log)
	s.reg = session.New(s.svc, h.Runtime, nil, Config(s.dir), log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.reg.Shutdown(ctx)
	})
	typ, val := reflect.TypeOf(s), reflect.ValueOf(s)
	n := 0
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if !strings.HasPrefix(name, "Test") {
			continue
		}
		run, ok := val.Method(i).Interface().(func(*testing.T))
		if !ok {
			t.Errorf("(*Suite).%s is named as a case but has type %s, want func(*testing.T)", name, val.Method(i).Type())
			continue
		}
		n++
		t.Run(strings.TrimPrefix(name, "Test"), run)
	}
	if n == 0 {
		t.Fatal("the suite found no cases: no method of *Suite is named Test…")
	}
}

// create makes a session of agent (mutate changes the request) and closes it when the case
// ends.
func (s *Suite) create(t *testing.T, agent string, mutate func(*sandbox.SessionRequest)) *session.Session {
	t.Helper()
	req := sandbox.SessionRequest{Agent: agent}
	if mutate != nil {
		mutate(&req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := s.reg.Create(ctx, req)
	if err != nil {
		t.Fatalf("creating a session: %v", err)
	}
	t.Cleanup(func() { _, _ = sess.Close(context.Background()) })
	return sess
}

// call runs code as sess's next call, with timeout.
func call(sess *session.Session, code string, timeout time.Duration) (sandbox.Result, error) {
	ms := timeout.Milliseconds()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	return sess.Execute(ctx, sandbox.Request{Code: code, TimeoutMS: &ms}, true, nil)
}

// mustCall runs code and fails t unless it ended ok.
func mustCall(t *testing.T, sess *session.Session, code string) sandbox.Result {
	t.Helper()
	res, err := call(sess, code, time.Minute)
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("call %q: outcome %s (%s); stderr: %s", code, res.Outcome, res.Reason, res.Stderr)
	}
	return res
}

// output is res's OUTPUT, decoded.
func output(t *testing.T, res sandbox.Result) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(res.Output, &v); err != nil {
		t.Fatalf("OUTPUT %s: %v", res.Output, err)
	}
	return v
}

// run runs a command in sess and returns its whole answer.
func run(t *testing.T, sess *session.Session, req session.CommandRequest) session.CommandResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := sess.Command(ctx, req, nil)
	if err != nil {
		t.Fatalf("command %q %q: %v", req.Cmd, req.Argv, err)
	}
	return res
}

// sh runs cmd with bash in sess and fails t unless it ended ok.
func sh(t *testing.T, sess *session.Session, cmd string) session.CommandResult {
	t.Helper()
	res := run(t, sess, session.CommandRequest{Cmd: cmd, TimeoutMS: ms(time.Minute)})
	if res.Process.End == nil || res.Process.End.Outcome != sandbox.OutcomeOK {
		t.Fatalf("command %q: %+v; stdout %q, stderr %q", cmd, res.Process.End, res.Stdout, res.Stderr)
	}
	return res
}

func ms(d time.Duration) *int64 { v := d.Milliseconds(); return &v }

// wantClass fails t unless err is of class with a message holding contains.
func wantClass(t *testing.T, what string, err, class error, contains string) {
	t.Helper()
	if err == nil || errclass.Of(err) != class || !strings.Contains(err.Error(), contains) {
		t.Fatalf("%s: got %v (class %v), want class %v mentioning %q", what, err, errclass.Of(err), class, contains)
	}
}

// waitSandboxes waits up to a minute until the runtime has want session sandboxes.
func (s *Suite) waitSandboxes(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := s.Sandboxes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session sandboxes, want %d", n, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitInfo waits up to a minute until sess's info satisfies ok.
func waitInfo(t *testing.T, sess *session.Session, ok func(sandbox.SessionInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		info := sess.Info()
		if ok(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session never reached the state: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isEnded(err error, reason string) bool {
	ended, ok := errors.AsType[*sandbox.SessionEndedError](err)
	return ok && ended.Info.EndReason == reason
}
