package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// An interactive terminal in a session (`session exec -t`) over the daemon's PTY routes: the
// command starts in the background with a PTY of this terminal's size, its output is followed
// (…/processes/{pid}/output), keys go to …/input and new sizes to …/resize. A background
// command has no timeout and no output cap, as a terminal session needs.

// terminal runs req in session id in a PTY wired to this process's standard input and output,
// and returns the end of a run with the command's exit status (reportedRun). Standard input
// must be a terminal (a usage error otherwise); it is in raw mode until it returns.
func (o *options) terminal(ctx context.Context, c *client.Client, agent, id string, req apitype.CommandRequest) error {
	f, ok := o.env.Stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		// A program in a terminal may flush what came before it reads (bash's readline did), the
		// end of a pipe or file among it: `-t -- bash </dev/null` waited for keys that never
		// came (a new user). docker exec -it refuses it too.
		return usageErrorf("-t needs standard input to be a terminal, and it is a pipe or a file; " +
			"without -t, -i passes standard input to the command (session exec -i ID -- CMD)")
	}
	state, err := term.MakeRaw(int(f.Fd()))
	if err != nil {
		return fmt.Errorf("putting the terminal in raw mode for -t: %w", err)
	}
	restore := sync.OnceFunc(func() { _ = term.Restore(int(f.Fd()), state) })
	defer restore()
	size := o.termSize()
	req.PTY, req.Background = &size, true
	if _, ok := req.Env["TERM"]; !ok {
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env["TERM"] = "xterm" // as docker exec -t sets it
		if t, _ := o.env.Lookup("TERM"); t != "" {
			req.Env["TERM"] = t
		}
	}
	res, err := c.Command(ctx, agent, id, req, nil)
	if err != nil {
		return err
	}
	pid := res.Process.ID

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go o.sendKeys(ctx, stop, c, agent, id, pid)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				// A size the process does not take (it has just ended) changes nothing to show.
				if s := o.termSize(); s != size {
					size = s
					_ = c.ResizeProcess(ctx, agent, id, pid, s)
				}
			}
		}
	}()

	p, err := c.ProcessOutput(ctx, agent, id, pid, true, o.printCommandOutput)
	restore()
	if err == nil && p.End == nil {
		err = fmt.Errorf("the daemon answered the end of command %s without how it ended", pid)
	}
	if err == nil {
		return reportedRun(commandResult(p.End))
	}
	// The command runs on without this terminal: hang it up, as a closed terminal does.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	hangup := c.SignalProcess(hctx, agent, id, pid, "SIGHUP")
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(o.env.Stderr, "sandpit: interrupted; command %s was sent SIGHUP\n", pid)
		return reported(context.Canceled)
	}
	if hangup != nil && !errors.Is(hangup, errclass.Conflict) { // Conflict: it has ended
		err = fmt.Errorf("%w; command %s may still run, and SIGHUP could not be sent (%v): sandpit session kill %s %s ends it", err, pid, hangup, id, pid)
	}
	return err
}

// sendKeys sends what standard input gives to process pid's terminal as it comes, and its end
// as the terminal's end of file. A failure to send stops the terminal with its error (stop),
// unless the process has ended (keys typed as it exits), whose end the output stream brings.
func (o *options) sendKeys(ctx context.Context, stop context.CancelCauseFunc, c *client.Client, agent, id, pid string) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := o.env.Stdin.Read(buf)
		in := apitype.ProcessInput{DataBase64: base64.StdEncoding.EncodeToString(buf[:n]), Close: rerr == io.EOF}
		if n == 0 && !in.Close {
			if rerr != nil {
				return
			}
			continue
		}
		if err := c.ProcessInput(ctx, agent, id, pid, in); err != nil {
			if ctx.Err() == nil && !(errors.Is(err, errclass.Conflict) && processEnded(ctx, c, agent, id, pid)) {
				stop(fmt.Errorf("sending standard input to command %s: %w", pid, err))
			}
			return
		}
		if rerr != nil {
			return
		}
	}
}

// processEnded says whether process pid of session id has ended (the daemon answers 409 to
// input for an ended process, and for one that took none of it for 10 s).
func processEnded(ctx context.Context, c *client.Client, agent, id, pid string) bool {
	list, err := c.Processes(ctx, agent, id)
	return err == nil && !slices.ContainsFunc(list, func(p apitype.Process) bool { return p.ID == pid && p.State == "running" })
}

// termSize is the size of this process's terminal (standard input's, else standard output's),
// 24 rows of 80 columns when neither is one.
func (o *options) termSize() apitype.TermSize {
	for _, s := range []any{o.env.Stdin, o.env.Stdout} {
		if f, ok := s.(*os.File); ok {
			if w, h, err := term.GetSize(int(f.Fd())); err == nil && w > 0 && h > 0 {
				return apitype.TermSize{Rows: uint16(min(h, 65535)), Cols: uint16(min(w, 65535))}
			}
		}
	}
	return apitype.TermSize{Rows: 24, Cols: 80}
}
