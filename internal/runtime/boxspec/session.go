package boxspec

import (
	"context"
	"net"
	"time"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// SessionLine is a session box's calls that go over its executor's control line as they are,
// the same on every runtime: installs, the workspace's commands and files (sandbox.Workspace),
// egress and the line's end. A runtime's session box embeds it and adds what differs (Run,
// Close, its files as a stream).
type SessionLine struct {
	Line *control.Line
	Pip  protocol.PipOptions // the daemon's pip settings, for installs and commands' pip
}

// Install makes req's requirements importable in the session's sandbox.
func (s SessionLine) Install(ctx context.Context, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	return s.Line.Install(ctx, req, s.Pip, progress)
}

// StartCommand starts a command in the session's box, with the daemon's pip settings (see
// sandbox.Workspace).
func (s SessionLine) StartCommand(ctx context.Context, id string, spec sandbox.CommandSpec, sink func(sandbox.ProcessEvent)) (int, error) {
	return s.Line.StartCommand(ctx, id, protocol.Command{Spec: spec, Pip: s.Pip}, sink)
}

func (s SessionLine) ProcessInput(ctx context.Context, id string, data []byte, closeStdin bool) error {
	return s.Line.ProcessInput(ctx, id, data, closeStdin)
}

func (s SessionLine) SignalProcess(ctx context.Context, id, signal string) error {
	return s.Line.SignalProcess(ctx, id, signal)
}

func (s SessionLine) ResizeProcess(ctx context.Context, id string, size sandbox.TermSize) error {
	return s.Line.ResizeProcess(ctx, id, size)
}

func (s SessionLine) AttachProcess(ctx context.Context, id, reader string, tail bool) error {
	return s.Line.AttachProcess(ctx, id, reader, tail)
}

func (s SessionLine) DetachProcess(ctx context.Context, id, reader string) error {
	return s.Line.DetachProcess(ctx, id, reader)
}

func (s SessionLine) ReadFile(ctx context.Context, op sandbox.FileRead) (sandbox.FileContent, error) {
	return s.Line.ReadFile(ctx, op)
}

func (s SessionLine) WriteFile(ctx context.Context, op sandbox.FileWrite) (sandbox.FileEntry, error) {
	return s.Line.WriteFile(ctx, op)
}

func (s SessionLine) ListFiles(ctx context.Context, op sandbox.FileList) (sandbox.FileListing, error) {
	return s.Line.ListFiles(ctx, op)
}

func (s SessionLine) StatFile(ctx context.Context, op sandbox.FileStat) (sandbox.FileEntry, error) {
	return s.Line.StatFile(ctx, op)
}

func (s SessionLine) MakeDir(ctx context.Context, op sandbox.FileMkdir) (sandbox.FileEntry, error) {
	return s.Line.MakeDir(ctx, op)
}

func (s SessionLine) RenameFile(ctx context.Context, op sandbox.FileRename) (sandbox.FileEntry, error) {
	return s.Line.RenameFile(ctx, op)
}

func (s SessionLine) RemoveFile(ctx context.Context, op sandbox.FileRemove) error {
	return s.Line.RemoveFile(ctx, op)
}

// DialPort connects to a port on the session box's loopback (see sandbox.Workspace).
func (s SessionLine) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return s.Line.DialPort(ctx, port)
}

// ListeningPorts lists the ports the session's processes listen on.
func (s SessionLine) ListeningPorts(ctx context.Context) ([]sandbox.ListeningPort, error) {
	return s.Line.ListeningPorts(ctx)
}

// WatchDir watches a directory of the session's box (see sandbox.Workspace).
func (s SessionLine) WatchDir(ctx context.Context, id string, spec sandbox.WatchSpec, sink func([]sandbox.WatchEvent, error)) (func(), error) {
	return s.Line.WatchDir(ctx, id, spec, sink)
}

// SetEgress sets the dialer of the session's commands' connections.
func (s SessionLine) SetEgress(d sandbox.EgressDialer) { s.Line.SetEgress(d) }

// Done is closed when the control line has ended; Err then says why.
func (s SessionLine) Done() <-chan struct{} { return s.Line.Done() }
func (s SessionLine) Err() error            { return s.Line.Err() }

// WarmPingTimeout bounds the ping a warm sandbox's executor must answer when a session claims
// it (control.Line.Ping): one frozen or hung since its last heartbeat is not handed out, and
// the session gets a sandbox of its own instead.
const WarmPingTimeout = 2 * time.Second

// PingWarm pings a claimed warm sandbox's executor over line, within WarmPingTimeout.
func PingWarm(ctx context.Context, line *control.Line) error {
	ctx, cancel := context.WithTimeout(ctx, WarmPingTimeout)
	defer cancel()
	return line.Ping(ctx)
}
