package executor

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// lineRecorder is the daemon's end of a session executor's line: it reads every frame and
// keeps the messages, but counts a command's output chunks only by their bytes.
type lineRecorder struct {
	mu     sync.Mutex
	cond   *sync.Cond
	msgs   []*protocol.Message
	stdout int64 // bytes of KindStdout chunks
}

func (l *lineRecorder) read(conn *protocol.Conn) {
	for {
		m, err := conn.Receive()
		if err != nil {
			l.cond.Broadcast()
			return
		}
		l.mu.Lock()
		if m.Kind == protocol.KindStdout {
			l.stdout += int64(len(m.Data))
		} else {
			l.msgs = append(l.msgs, m)
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

func (l *lineRecorder) stdoutBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stdout
}

// wait returns the first message kept of kind with ID id, waiting up to 10 s.
func (l *lineRecorder) wait(t *testing.T, kind protocol.Kind, id string) *protocol.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	timer := time.AfterFunc(10*time.Second, l.cond.Broadcast)
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for _, m := range l.msgs {
			if m.Kind == kind && m.ID == id {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s message for %s in 10 s", kind, id)
		}
		l.cond.Wait()
	}
}

// TestH83DetachedBackgroundOutputStaysInTheBox: a background `yes` no one reads sends nothing
// over the line (it wrote 132 MB in 8 s to the daemon before); a reader that attaches gets
// the box's last 64 KiB with the count of all it wrote, then the live output, and none once
// it detaches; its end carries what the box kept.
func TestH83DetachedBackgroundOutputStaysInTheBox(t *testing.T) {
	needRoot(t)
	root, err := os.MkdirTemp("", "sandpit-commands-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	execR, daemonW := io.Pipe()
	daemonR, execW := io.Pipe()
	cfg := DefaultConfig()
	cfg.UIDBase, cfg.Slots, cfg.RunRoot, cfg.SessionHome = testUID, 1, root, filepath.Join(root, "home")
	cfg.MatplotlibCache = filepath.Join(root, "no-cache")
	e := &Executor{cfg: cfg, conn: protocol.NewConn(execR, execW), log: slog.New(slog.DiscardHandler),
		procs: map[string]*proc{}, homesReady: map[int]bool{}, pythonVersion: "3.11.2"}
	rec := &lineRecorder{}
	rec.cond = sync.NewCond(&rec.mu)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		rec.read(protocol.NewConn(daemonR, io.Discard))
	}()
	defer func() {
		daemonW.Close()
		execW.Close()
		<-readDone
	}()

	const id = "pr_yes"
	e.startCommand(0, id, protocol.Command{Spec: sandbox.CommandSpec{Argv: []string{"yes"}, KeepStdin: true, Background: true}})
	if m := rec.wait(t, protocol.KindProcStarted, id); m.ProcStarted == nil {
		t.Fatalf("yes did not start: %s", m.Error)
	}
	e.mu.Lock()
	p := e.procs[id]
	e.mu.Unlock()
	written := func() int64 {
		p.pumpMu.Lock()
		defer p.pumpMu.Unlock()
		return p.ring[0].total
	}
	time.Sleep(time.Second)
	if n := written(); n < 4*sandbox.ProcessTailBytes {
		t.Fatalf("yes wrote %d bytes in a second; want far more", n)
	}
	if n := rec.stdoutBytes(); n != 0 {
		t.Fatalf("a background command no one reads sent %d bytes over the line; want none", n)
	}

	e.procOp(&protocol.Message{Kind: protocol.KindProcAttach, ID: "op_attach", ProcAttach: &protocol.ProcAttach{Proc: id, Reader: "r1", Tail: true}})
	if ack := rec.wait(t, protocol.KindProcAck, "op_attach"); ack.Error != "" {
		t.Fatalf("attach: %s", ack.Error)
	}
	tail := rec.wait(t, protocol.KindProcTail, id).ProcTail
	if tail == nil || tail.Reader != "r1" || len(tail.Stdout) != sandbox.ProcessTailBytes || tail.StdoutBytes <= int64(4*sandbox.ProcessTailBytes) || tail.Stdout[:2] != "y\n" {
		t.Fatalf("the tail for r1: %d bytes of %d, starting %q; want the last %d bytes of far more, from a line's start",
			len(tail.Stdout), tail.StdoutBytes, tail.Stdout[:min(len(tail.Stdout), 8)], sandbox.ProcessTailBytes)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.stdoutBytes() < 1<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("an attached reader got %d bytes of live output in 5 s; want a MiB", rec.stdoutBytes())
		}
		time.Sleep(10 * time.Millisecond)
	}

	e.procOp(&protocol.Message{Kind: protocol.KindProcDetach, ID: "op_detach", ProcAttach: &protocol.ProcAttach{Proc: id, Reader: "r1"}})
	if ack := rec.wait(t, protocol.KindProcAck, "op_detach"); ack.Error != "" {
		t.Fatalf("detach: %s", ack.Error)
	}
	before, wrote := rec.stdoutBytes(), written()
	time.Sleep(500 * time.Millisecond)
	if n := rec.stdoutBytes() - before; n != 0 {
		t.Fatalf("%d bytes crossed the line after the reader detached; want none", n)
	}
	if written() <= wrote {
		t.Fatal("yes wrote nothing after the reader detached: it was blocked, not kept in the box")
	}

	e.procOp(&protocol.Message{Kind: protocol.KindProcSignal, ID: "op_kill", ProcSignal: &protocol.ProcSignal{Proc: id, Signal: "SIGKILL"}})
	end := rec.wait(t, protocol.KindProcEnded, id)
	if end.ProcEnded == nil || end.ProcEnded.Outcome != sandbox.OutcomeKilled {
		t.Fatalf("the end: %+v; want killed", end.ProcEnded)
	}
	if end.ProcTail == nil || len(end.ProcTail.Stdout) != sandbox.ProcessTailBytes || end.ProcTail.StdoutBytes < tail.StdoutBytes {
		t.Fatalf("the end's tail: %+v; want the last %d bytes", end.ProcTail, sandbox.ProcessTailBytes)
	}
	e.wg.Wait()
}

// TestRing: the ring keeps the last ProcessTailBytes whatever the writes' sizes, from a
// character's start, and counts all.
func TestRing(t *testing.T) {
	var r ring
	var all []byte
	for i, n := range []int{1, 1000, 70000, 3, 65536, 131071, 5, 40000, 2} {
		s := string(rune('a'+i%26)) + "é" + string(make([]byte, n))
		r.write(s)
		all = append(all, s...)
	}
	want := string(all[len(all)-sandbox.ProcessTailBytes:])
	if got := r.kept(); got != want || r.total != int64(len(all)) {
		t.Fatalf("kept %d bytes (total %d); want the last %d of %d", len(got), r.total, len(want), len(all))
	}
	r = ring{}
	r.write("é")
	r.write(string(make([]byte, sandbox.ProcessTailBytes-1))) // the last 64 KiB start inside é
	if got := r.kept(); len(got) != sandbox.ProcessTailBytes-1 {
		t.Fatalf("kept %d bytes; want %d, from the character after é", len(got), sandbox.ProcessTailBytes-1)
	}
}
