package session

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// commandBox is a fakeBox whose commands print "hi" and end at once, from a goroutine of
// their own (as the control line's reader is); signalled counts SignalProcess calls.
type commandBox struct {
	*fakeBox
	signalled atomic.Int32
}

func (b *commandBox) StartCommand(_ context.Context, _ string, _ sandbox.CommandSpec, sink func(sandbox.ProcessEvent)) (int, error) {
	go func() {
		sink(sandbox.ProcessEvent{Stream: sandbox.StreamStdout, Data: "hi\n"})
		sink(sandbox.ProcessEvent{End: &sandbox.ProcessEnd{Outcome: sandbox.OutcomeOK}})
	}()
	return 7, nil
}

func (b *commandBox) SignalProcess(context.Context, string, string) error {
	b.signalled.Add(1)
	return nil
}

type commandOpener struct{ box *commandBox }

func (o *commandOpener) OpenSession(context.Context, string) (sandbox.SessionBox, error) {
	return o.box, nil
}

// TestCommandWhoseClientLeavesAfterItsEnd: a client that goes away once it has the command's
// end (the CLI's session exec does) got its command killed and an error logged as "client
// went away before the execution answered", though the command had answered. It is an
// ordinary end now, and nothing is signalled.
func TestCommandWhoseClientLeavesAfterItsEnd(t *testing.T) {
	box := &commandBox{fakeBox: newFakeBox()}
	m := newKeeper(newService(engine.Hooks{}), &commandOpener{box: box}, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		ctx, cancel := context.WithCancel(t.Context())
		res, err := m.Command(ctx, "a", s.ID, CommandRequest{Cmd: "echo hi"}, func(ev CommandEvent) {
			if ev.Type == "end" {
				cancel()                          // the client read the end and left
				time.Sleep(20 * time.Millisecond) // while the end is still being passed on
			}
		})
		cancel()
		if err != nil || res.Process.End == nil || res.Process.End.Outcome != sandbox.OutcomeOK || res.Stdout != "hi\n" {
			t.Fatalf("Command: %+v, %v; want its ok end", res, err)
		}
	}
	if n := box.signalled.Load(); n != 0 {
		t.Fatalf("%d commands that had ended were signalled", n)
	}
}

// lingerBox is a fakeBox whose commands run until the box is closed, and then end as the
// control line ends them when the sandbox goes: sandbox_error.
type lingerBox struct {
	*fakeBox
	mu    sync.Mutex
	sinks []func(sandbox.ProcessEvent)
}

func (b *lingerBox) StartCommand(_ context.Context, _ string, _ sandbox.CommandSpec, sink func(sandbox.ProcessEvent)) (int, error) {
	b.mu.Lock()
	b.sinks = append(b.sinks, sink)
	b.mu.Unlock()
	return 8, nil
}

func (b *lingerBox) Close(ctx context.Context) error {
	b.mu.Lock()
	sinks := b.sinks
	b.mu.Unlock()
	for _, sink := range sinks {
		sink(sandbox.ProcessEvent{End: &sandbox.ProcessEnd{ExitCode: -1, Outcome: sandbox.OutcomeSandboxError,
			Reason: "the session's sandbox stopped: the control line to the executor ended: closed by the daemon", DurationMS: 1500}})
	}
	return b.fakeBox.Close(ctx)
}

type lingerOpener struct{ box *lingerBox }

func (o *lingerOpener) OpenSession(context.Context, string) (sandbox.SessionBox, error) {
	return o.box, nil
}

type commandLedger struct {
	mu    sync.Mutex
	procs []sandbox.ProcessInfo
}

func (l *commandLedger) RecordCommand(_ context.Context, _ string, p sandbox.ProcessInfo) error {
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return nil
}

// TestCommandsEndedWithTheirSession: a background command still running when its session's
// sandbox is removed on purpose (the session closed, or hibernated) was recorded as a
// sandbox_error, "closed by the daemon" (trial, 2 December 2026). It is recorded as killed,
// saying the session ended, with how long it ran.
func TestCommandsEndedWithTheirSession(t *testing.T) {
	box := &lingerBox{fakeBox: newFakeBox()}
	ledger := &commandLedger{}
	m := newKeeper(newService(engine.Hooks{}), &lingerOpener{box: box}, nil, DefaultConfig())
	m.SetCommandRecorder(ledger)
	defer m.Shutdown(context.Background())
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Command(t.Context(), "a", s.ID, CommandRequest{Cmd: "sleep 300", Background: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Close(t.Context(), "a", s.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		ledger.mu.Lock()
		defer ledger.mu.Unlock()
		return len(ledger.procs) == 1
	})
	end := ledger.procs[0].End
	if end == nil || end.Outcome != sandbox.OutcomeKilled || !strings.Contains(end.Reason, "the session ended") || end.DurationMS != 1500 {
		t.Fatalf("the command's end: %+v; want killed, saying the session ended", end)
	}
}
