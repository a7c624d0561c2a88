package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/e2b/proto/process"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// proc is a process started through envd: E2B names it by its PID in the box or its tag,
// the workspace by its process ID.
type proc struct {
	id     string // the workspace's "pr_…"
	pid    uint32
	tag    string
	config *process.ProcessConfig
	pty    bool
}

// processService is envd's process.Process over the session's workspace.
type processService struct{ s *Server }

func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	b := boxOf(ctx)
	done, err := p.s.openStream(ctx)
	if err != nil {
		return err
	}
	defer done()
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty: name the program to run (the SDKs send /bin/bash with -l -c and the command)"))
	}
	// The sandbox's envVars are its session's environment, under the process's own.
	// As on E2B, a process may start in any directory the session's user can enter ("/" too).
	creq := session.CommandRequest{Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Cwd: cfg.GetCwd(), AnyCwd: true,
		Env: cfg.GetEnvs(), Background: true}
	if pty := req.Msg.GetPty(); pty != nil {
		creq.PTY = &sandbox.TermSize{Rows: uint16(min(pty.GetSize().GetRows(), 1<<16-1)), Cols: uint16(min(pty.GetSize().GetCols(), 1<<16-1))}
	}
	tag := req.Msg.GetTag()
	if tag != "" {
		p.s.mu.Lock()
		_, taken := b.tags[tag]
		p.s.mu.Unlock()
		if taken {
			return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("tag %q names a process of this sandbox already: choose another", tag))
		}
	}
	res, err := b.sess.Command(ctx, creq, nil)
	if err != nil {
		return connectError(err)
	}
	pr := &proc{id: res.Process.ID, pid: uint32(res.Process.PID), tag: tag, config: cfg, pty: creq.PTY != nil}
	p.s.mu.Lock()
	b.procs[pr.pid] = pr
	if tag != "" {
		b.tags[tag] = pr.pid
	}
	p.s.mu.Unlock()
	if req.Msg.Stdin != nil && !req.Msg.GetStdin() && creq.PTY == nil {
		if err := b.sess.Input(ctx, pr.id, nil, true); err != nil {
			p.s.log.Debug("closing a new process's stdin", "sandbox", b.id, "process", pr.id, "error", err)
		}
	}
	return p.s.follow(ctx, b, pr, true, keepaliveInterval(req.Header()), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	b := boxOf(ctx)
	done, err := p.s.openStream(ctx)
	if err != nil {
		return err
	}
	defer done()
	pr, err := p.s.selectProc(ctx, b, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	return p.s.follow(ctx, b, pr, false, keepaliveInterval(req.Header()), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

// follow streams pr's events to send (its start, output and end), with keepalive events
// while it is quiet, until it ends or the client leaves.
func (s *Server) follow(ctx context.Context, b *box, pr *proc, tail bool, every time.Duration, send func(*process.ProcessEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *process.ProcessEvent, 64)
	done := make(chan error, 1)
	go func() {
		_, err := b.sess.Attach(ctx, pr.id, tail, func(ev session.CommandEvent) {
			if pe := processEvent(ev, pr.pty); pe != nil {
				select {
				case events <- pe:
				case <-ctx.Done():
				}
			}
		})
		done <- err
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case ev := <-events:
			if ev.GetEnd() != nil && cutOff(b) {
				panic(http.ErrAbortHandler)
			}
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				return nil
			}
		case err := <-done:
			for { // what Attach passed before it returned
				select {
				case ev := <-events:
					if ev.GetEnd() != nil && cutOff(b) {
						panic(http.ErrAbortHandler)
					}
					if serr := send(ev); serr != nil {
						return serr
					}
					continue
				default:
				}
				if cutOff(b) {
					panic(http.ErrAbortHandler)
				}
				return connectError(err)
			}
		case <-tick.C:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		}
	}
}

// processEvent is a workspace event as envd's; nil for none.
func processEvent(ev session.CommandEvent, pty bool) *process.ProcessEvent {
	switch ev.Type {
	case "start":
		return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(ev.Process.PID)}}}
	case "stdout", "stderr":
		data := &process.ProcessEvent_DataEvent{}
		switch {
		case pty:
			data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: []byte(ev.Data)}
		case ev.Type == "stdout":
			data.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(ev.Data)}
		default:
			data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: []byte(ev.Data)}
		}
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}}
	case "end":
		end := &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "ended"}
		if e := ev.Process.End; e != nil {
			end.ExitCode = int32(e.ExitCode)
			end.Exited = e.Signal == "" && e.ExitCode >= 0
			end.Status = fmt.Sprintf("exit status %d", e.ExitCode)
			if e.Signal != "" {
				end.Status = "signal: " + strings.ToLower(strings.TrimPrefix(e.Signal, "SIG"))
			}
			if e.Outcome != sandbox.OutcomeOK && e.Outcome != sandbox.OutcomeError && e.Reason != "" {
				end.Error = &e.Reason
			}
		}
		return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}
	}
	return nil
}

// selectProc finds the process a selector names among b's.
func (s *Server) selectProc(ctx context.Context, b *box, sel *process.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	var pr *proc
	switch {
	case sel == nil:
	case sel.GetTag() != "":
		pr = b.procs[b.tags[sel.GetTag()]]
	default:
		pr = b.procs[sel.GetPid()]
	}
	s.mu.Unlock()
	if pr != nil {
		return pr, nil
	}
	if sel != nil && sel.GetTag() == "" { // one started another way (sandpit's REST API)
		list, err := b.sess.Processes(ctx)
		if err != nil {
			return nil, connectError(err)
		}
		for _, info := range list {
			if uint32(info.PID) == sel.GetPid() && info.State == "running" {
				return &proc{id: info.ID, pid: uint32(info.PID), config: &process.ProcessConfig{Cmd: info.Argv[0], Args: info.Argv[1:]}, pty: info.PTY != nil}, nil
			}
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process of this sandbox has %s: List shows the running ones", describe(sel)))
}

func describe(sel *process.ProcessSelector) string {
	if sel.GetTag() != "" {
		return fmt.Sprintf("tag %q", sel.GetTag())
	}
	return fmt.Sprintf("pid %d", sel.GetPid())
}

func (p *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	b := boxOf(ctx)
	list, err := b.sess.Processes(ctx)
	if err != nil {
		return nil, connectError(err)
	}
	out := &process.ListResponse{}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for _, info := range list {
		if info.State != "running" {
			continue
		}
		pi := &process.ProcessInfo{Pid: uint32(info.PID), Config: &process.ProcessConfig{Cmd: info.Argv[0], Args: info.Argv[1:], Cwd: &info.Cwd}}
		if pr := b.procs[uint32(info.PID)]; pr != nil && pr.id == info.ID {
			pi.Config = pr.config
			if pr.tag != "" {
				pi.Tag = &pr.tag
			}
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	b := boxOf(ctx)
	pr, err := p.s.selectProc(ctx, b, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.input(ctx, b, pr, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processService) input(ctx context.Context, b *box, pr *proc, in *process.ProcessInput) error {
	data := in.GetStdin()
	if in.GetPty() != nil {
		data = in.GetPty()
	}
	return connectError(b.sess.Input(ctx, pr.id, data, false))
}

func (p *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	b := boxOf(ctx)
	done, err := p.s.openStream(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var pr *proc
	for stream.Receive() {
		msg := stream.Msg()
		switch {
		case msg.GetStart() != nil:
			var err error
			if pr, err = p.s.selectProc(ctx, b, msg.GetStart().GetProcess()); err != nil {
				return nil, err
			}
		case msg.GetData() != nil:
			if pr == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the stream's first message must be start, naming the process"))
			}
			if err := p.input(ctx, b, pr, msg.GetData().GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	b := boxOf(ctx)
	pr, err := p.s.selectProc(ctx, b, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if pr.pty {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("a process in a terminal has no stdin to close: send Ctrl-D (0x04) as its input"))
	}
	if err := b.sess.Input(ctx, pr.id, nil, true); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	b := boxOf(ctx)
	pr, err := p.s.selectProc(ctx, b, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = "SIGKILL"
	case process.Signal_SIGNAL_SIGTERM:
		sig = "SIGTERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v is not one envd sends: use SIGNAL_SIGTERM or SIGNAL_SIGKILL", req.Msg.GetSignal()))
	}
	if err := b.sess.Signal(ctx, pr.id, sig); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	b := boxOf(ctx)
	pr, err := p.s.selectProc(ctx, b, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		ts := sandbox.TermSize{Rows: uint16(min(size.GetRows(), 1<<16-1)), Cols: uint16(min(size.GetCols(), 1<<16-1))}
		if err := b.sess.Resize(ctx, pr.id, ts); err != nil {
			return nil, connectError(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}
