package jobs_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// secretsOnly is engine.Secrets: TOKEN is the one secret there is.
type secretsOnly struct{}

func (secretsOnly) Open(_ context.Context, _ string, names []string) (engine.SecretsRun, error) {
	for _, n := range names {
		if n != "TOKEN" {
			return nil, &sandbox.FieldError{Field: "secrets", Message: n + " is not a secret"}
		}
	}
	return secretsRun{}, nil
}

type secretsRun struct{}

func (secretsRun) Env() map[string]string             { return map[string]string{"TOKEN": "placeholder"} }
func (secretsRun) CA() string                         { return "PEM" }
func (secretsRun) Attach(sandbox.EgressRun)           {}
func (secretsRun) Take() ([]sandbox.SecretUse, int)   { return nil, 0 }
func (noEgress) CheckAllow([]string) error            { return nil }
func (noEgress) ForRun(...[]string) sandbox.EgressRun { return closedRun{} }
func (noEgress) ForInstall() sandbox.EgressRun        { return closedRun{} }
func (noEgress) ForWorkspace([]string, func(sandbox.EgressConnection)) sandbox.EgressRun {
	return closedRun{}
}

// noEgress is sandbox.EgressPolicy: every dialer refuses.
type noEgress struct{}

type closedRun struct{}

func (closedRun) DialEgress(context.Context, string, int) (net.Conn, error) {
	return nil, errors.New("refused")
}
func (closedRun) Close()                                         {}
func (closedRun) Connections() ([]sandbox.EgressConnection, int) { return nil, 0 }

// envRuntime records the secret placeholders each run got.
type envRuntime struct {
	mu   sync.Mutex
	seen []map[string]string
}

func (r *envRuntime) Ready(context.Context) error { return nil }
func (r *envRuntime) Run(_ context.Context, _ int, spec sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	r.mu.Lock()
	r.seen = append(r.seen, spec.SecretEnv)
	r.mu.Unlock()
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

// TestJobSecretsReachEachRun: a job names secrets; an unknown one is refused as the job is
// saved (not first at a fire), and each fire's run gets the placeholders.
func TestJobSecretsReachEachRun(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := &envRuntime{}
	svc := engine.NewService(rt, engine.Hooks{Recorder: st, Egress: noEgress{}, Secrets: secretsOnly{}}, engine.DefaultConfig(), nil)
	lib := library.New(st, svc, 0)
	if _, err := lib.Create(t.Context(), "a", "work", library.Draft{Code: "pass"}); err != nil {
		t.Fatal(err)
	}
	s := jobs.New(st, lib, svc, jobs.Config{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	_, err = s.Create(t.Context(), "a", jobs.Draft{CodeName: "work", Schedule: "@daily", Secrets: []string{"NOPE"}})
	if fe, ok := errors.AsType[*sandbox.FieldError](err); !ok || fe.Field != "secrets" {
		t.Fatalf("a job naming an unknown secret: %v, want a secrets field error", err)
	}
	j, err := s.Create(t.Context(), "a", jobs.Draft{CodeName: "work", Schedule: "@daily", Secrets: []string{"TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.Secrets, []string{"TOKEN"}) {
		t.Errorf("the job's secrets: %v", j.Secrets)
	}
	if _, err := s.RunNow(t.Context(), "a", j.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rt.mu.Lock()
		seen := slices.Clone(rt.seen)
		rt.mu.Unlock()
		if len(seen) == 1 && seen[0]["TOKEN"] == "placeholder" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fire's run got secrets %v", seen)
		}
	}
}
