package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's commands and files over the line (protocol version 5; a background command's
// readers, version 8).

// StartCommand starts c as process id in the session's box and returns its PID there. From
// then on sink receives the process's events in order, from one goroutine, ending with its
// end (also when the line ends first: outcome sandbox_error). Errors: the executor's refusal
// (of its class: a bad cwd is invalid), or an error wrapping ErrNotReady.
func (c *Line) StartCommand(ctx context.Context, id string, cmd protocol.Command, sink func(sandbox.ProcessEvent)) (int, error) {
	cl, unregister, err := c.register(id)
	if err != nil {
		return 0, err
	}
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindCommand, ID: id, Command: &cmd}); err != nil {
		unregister()
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			return 0, errclass.Wrap(errclass.TooLarge, fmt.Errorf("the command and its stdin do not fit in one message to the sandbox: %w", err))
		}
		c.fail(fmt.Errorf("%w: sending a command: %w", ErrClosed, err))
		return 0, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	var pending []*protocol.Message
	pid := 0
	var started time.Time
wait:
	for {
		select {
		case <-cl.notify:
			msgs := cl.drain()
			for i, m := range msgs {
				if m.Kind != protocol.KindProcStarted {
					continue
				}
				if m.ProcStarted == nil {
					unregister()
					return 0, remoteError(m)
				}
				pid = m.ProcStarted.PID
				pending = msgs[i+1:]
				started = time.Now()
				break wait
			}
		case <-ctx.Done():
			// It may start still: it is stopped by the executor's end, or the session's.
			unregister()
			return 0, ctx.Err()
		case <-c.done:
			unregister()
			return 0, fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.Err())
		}
	}
	go func() {
		defer unregister()
		deliver := func(msgs []*protocol.Message) bool {
			for _, m := range msgs {
				switch m.Kind {
				case protocol.KindStdout, protocol.KindStderr:
					sink(sandbox.ProcessEvent{Stream: sandbox.Stream(m.Kind), Data: m.Data})
				case protocol.KindProcTail:
					if m.ProcTail != nil {
						sink(sandbox.ProcessEvent{Tail: m.ProcTail})
					}
				case protocol.KindProcEnded:
					if m.ProcEnded != nil {
						end := *m.ProcEnded
						sink(sandbox.ProcessEvent{End: &end, Tail: m.ProcTail})
						return true
					}
				}
			}
			return false
		}
		if deliver(pending) {
			return
		}
		for {
			select {
			case <-cl.notify:
				if deliver(cl.drain()) {
					return
				}
			case <-c.done:
				if deliver(cl.drain()) {
					return
				}
				sink(sandbox.ProcessEvent{End: &sandbox.ProcessEnd{ExitCode: -1, Outcome: sandbox.OutcomeSandboxError,
					Reason: "the session's sandbox stopped: " + c.Err().Error(), DurationMS: time.Since(started).Milliseconds()}})
				return
			}
		}
	}()
	return pid, nil
}

// SetEgress sets the dialer of the workspace's connections (sandbox.WorkspaceEgressOwner):
// those of a session's commands; nil removes it.
func (c *Line) SetEgress(d sandbox.EgressDialer) {
	if d == nil {
		c.endEgress(sandbox.WorkspaceEgressOwner)
		return
	}
	c.mu.Lock()
	c.dialers[sandbox.WorkspaceEgressOwner] = d
	c.mu.Unlock()
}

// remoteError is the error of an executor's refusal m, of the class it names.
func remoteError(m *protocol.Message) error {
	msg := m.Error
	if msg == "" {
		msg = "the executor answered " + string(m.Kind) + " without content"
	}
	for _, class := range errclass.Classes {
		if class.Error() == m.ErrorClass {
			return errclass.New(class, msg)
		}
	}
	return errors.New(msg)
}

// request sends m (with a new ID) and returns the executor's answer of kind want.
func (c *Line) request(ctx context.Context, prefix string, m *protocol.Message, want protocol.Kind) (*protocol.Message, error) {
	m.ID = prefix + sandbox.NewID()[3:]
	cl, unregister, err := c.register(m.ID)
	if err != nil {
		return nil, err
	}
	defer unregister()
	if err := c.conn.Send(m); err != nil {
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			return nil, errclass.Wrap(errclass.TooLarge, fmt.Errorf("the request does not fit in one message to the sandbox: %w", err))
		}
		c.fail(fmt.Errorf("%w: sending a %s request: %w", ErrClosed, m.Kind, err))
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	for {
		select {
		case <-cl.notify:
			for _, r := range cl.drain() {
				if r.Kind == want {
					if r.Error != "" {
						return nil, remoteError(r)
					}
					return r, nil
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.Err())
		}
	}
}

// ProcessInput writes data to process id's stdin, closing it after when closeStdin is set.
func (c *Line) ProcessInput(ctx context.Context, id string, data []byte, closeStdin bool) error {
	_, err := c.request(ctx, "op_", &protocol.Message{Kind: protocol.KindProcInput,
		ProcInput: &protocol.ProcInput{Proc: id, Data: data, Close: closeStdin}}, protocol.KindProcAck)
	return err
}

// SignalProcess sends process id's process group signal (a name of sandbox.Signals).
func (c *Line) SignalProcess(ctx context.Context, id, signal string) error {
	_, err := c.request(ctx, "op_", &protocol.Message{Kind: protocol.KindProcSignal,
		ProcSignal: &protocol.ProcSignal{Proc: id, Signal: signal}}, protocol.KindProcAck)
	return err
}

// ResizeProcess sets the size of process id's terminal.
func (c *Line) ResizeProcess(ctx context.Context, id string, size sandbox.TermSize) error {
	_, err := c.request(ctx, "op_", &protocol.Message{Kind: protocol.KindProcResize,
		ProcResize: &protocol.ProcResize{Proc: id, Size: size}}, protocol.KindProcAck)
	return err
}

// AttachProcess makes reader a reader of process id's output (see sandbox.Workspace): the
// process's sink gets a Tail event for it, then the chunks from then on.
func (c *Line) AttachProcess(ctx context.Context, id, reader string, tail bool) error {
	_, err := c.request(ctx, "op_", &protocol.Message{Kind: protocol.KindProcAttach,
		ProcAttach: &protocol.ProcAttach{Proc: id, Reader: reader, Tail: tail}}, protocol.KindProcAck)
	return err
}

// DetachProcess ends reader's reading of process id's output.
func (c *Line) DetachProcess(ctx context.Context, id, reader string) error {
	_, err := c.request(ctx, "op_", &protocol.Message{Kind: protocol.KindProcDetach,
		ProcAttach: &protocol.ProcAttach{Proc: id, Reader: reader}}, protocol.KindProcAck)
	return err
}

// file sends a file request and returns its reply.
func (c *Line) file(ctx context.Context, m *protocol.Message) (*protocol.FileReply, error) {
	r, err := c.request(ctx, "fo_", m, protocol.KindFileReply)
	if err != nil {
		return nil, err
	}
	if r.FileReply == nil {
		return nil, errors.New("the executor sent a file reply without content")
	}
	return r.FileReply, nil
}

func entryOf(r *protocol.FileReply) sandbox.FileEntry {
	if r.Entry == nil {
		return sandbox.FileEntry{}
	}
	return *r.Entry
}

// ReadFile reads a session's file (see sandbox.FileRead).
func (c *Line) ReadFile(ctx context.Context, op sandbox.FileRead) (sandbox.FileContent, error) {
	r, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileRead, FileRead: &op})
	if err != nil {
		return sandbox.FileContent{}, err
	}
	return sandbox.FileContent{Entry: entryOf(r), Content: r.Content}, nil
}

// WriteFile writes a session's file (see sandbox.FileWrite).
func (c *Line) WriteFile(ctx context.Context, op sandbox.FileWrite) (sandbox.FileEntry, error) {
	r, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileWrite, FileWrite: &op})
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return entryOf(r), nil
}

// ListFiles lists a session's directory (see sandbox.FileList).
func (c *Line) ListFiles(ctx context.Context, op sandbox.FileList) (sandbox.FileListing, error) {
	r, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileList, FileList: &op})
	if err != nil {
		return sandbox.FileListing{}, err
	}
	if r.Listing == nil {
		return sandbox.FileListing{Entries: []sandbox.FileEntry{}}, nil
	}
	return *r.Listing, nil
}

// StatFile describes a session's path (see sandbox.FileStat).
func (c *Line) StatFile(ctx context.Context, op sandbox.FileStat) (sandbox.FileEntry, error) {
	r, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileStat, FileStat: &op})
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return entryOf(r), nil
}

// MakeDir makes a session's directory (see sandbox.FileMkdir).
func (c *Line) MakeDir(ctx context.Context, op sandbox.FileMkdir) (sandbox.FileEntry, error) {
	r, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileMkdir, FileMkdir: &op})
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return entryOf(r), nil
}

// RenameFile renames or moves a session's file (see sandbox.FileRename).
func (c *Line) RenameFile(ctx context.Context, op sandbox.FileRename) (sandbox.FileEntry, error) {
	r, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileRename, FileRename: &op})
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return entryOf(r), nil
}

// RemoveFile removes a session's file or directory (see sandbox.FileRemove).
func (c *Line) RemoveFile(ctx context.Context, op sandbox.FileRemove) error {
	_, err := c.file(ctx, &protocol.Message{Kind: protocol.KindFileRemove, FileRemove: &op})
	return err
}
