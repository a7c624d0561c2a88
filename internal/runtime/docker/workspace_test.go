package docker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// A session's workspace on the real engine is proved by the session suite
// (internal/session/sessiontest, TestSessionSuite); this file keeps what needs the engine's
// own package index and egress.

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
	reg := session.New(svc, rt, nil, session.DefaultConfig(), testenv.Logger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		reg.Shutdown(ctx)
	})
	e := &sessionEnv{rt: rt, svc: svc, reg: reg}
	s := e.create(t, "pia", func(r *sandbox.SessionRequest) { r.Dependencies = []string{"tinypkg==1.0"} })
	if deps := s.Info().Dependencies; len(deps) != 1 || deps[0].Status == sandbox.DependencyFailed {
		t.Fatalf("the session's dependencies: %+v", deps)
	}
	if got := output(t, e.mustCall(t, s, "import tinypkg\nOUTPUT = tinypkg.VALUE")); got != "1.0" {
		t.Fatalf("tinypkg: %v", got)
	}
	ms := int64(2 * time.Minute / time.Millisecond)
	res, err := s.Command(t.Context(), session.CommandRequest{Cmd: "pip install otherpkg==2.0", TimeoutMS: &ms}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Process.End.Outcome != sandbox.OutcomeOK {
		t.Fatalf("pip install: %+v\n%s\n%s", res.Process.End, res.Stdout, res.Stderr)
	}
	if got := output(t, e.mustCall(t, s, "import otherpkg\nOUTPUT = [otherpkg.VALUE, otherpkg.__file__]")); fmt.Sprint(got) != "[2.0 /home/user/.local/lib/python3.11/site-packages/otherpkg/__init__.py]" {
		t.Fatalf("otherpkg in the interpreter: %v", got)
	}
	res, err = s.Command(t.Context(), session.CommandRequest{Cmd: "python3 -c 'import otherpkg; print(otherpkg.VALUE)'"}, nil)
	if err != nil || res.Stdout != "2.0\n" {
		t.Fatalf("otherpkg in a command: %q, %v", res.Stdout, err)
	}
}
