package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
	m := NewSessions(NewService(&fakeRuntime{}, Hooks{}, DefaultConfig(), nil), &commandOpener{box: box}, nil, DefaultSessionConfig(), nil)
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
