package cli

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's workspace from the command line: sandpit session exec, cp, and ls ID [PATH].

func (o *options) sessionExecCommand() *cobra.Command {
	var (
		f          daemonFlags
		shell      string
		cwd        string
		env        []string
		timeout    time.Duration
		stdin      bool
		background bool
		tty        bool
	)
	cmd := &cobra.Command{
		Use:   "exec ID [-c 'SHELL LINE' | -- PROGRAM [ARG...]]",
		Short: "Run a command in a session's sandbox (as its user, in /home/user) and print its output as it comes",
		Long: `Run a command in session ID's sandbox, beside its interpreter: as the session's user, in its
home /home/user (the interpreter's directory: files are shared both ways), under its limits and
network policy. -c runs a shell line with bash -lc; otherwise the words after -- are the program
and its arguments. stdout and stderr are printed as they come; the exit status is the command's
(124 past --timeout, when it is killed with every process it started). -i sends standard input.
--background starts it and prints its process ID (a server, a long job).

-t runs it in a terminal, as docker exec -it does: this terminal is put in raw mode and hands
the command every key (Ctrl-C included) and its size as it changes; what the command prints
drives this terminal. It runs until it ends (no --timeout), and exits with its status; if
sandpit stops first, the command gets SIGHUP, as from a terminal that closed.`,
		Example: `  sandpit session exec se_... -- ls -la
  sandpit session exec se_... -c 'pip install tabulate && python3 -c "import tabulate"'
  cat data.csv | sandpit session exec se_... -i -- wc -l
  sandpit session exec -t se_... -- bash`,
		Args: withSessionID(func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageErrorf("give the session ID, then -c 'SHELL LINE' or -- PROGRAM [ARG...]")
			}
			if (shell == "") == (len(args) == 1) {
				return usageErrorf("give either -c 'SHELL LINE' or -- PROGRAM [ARG...] after the session ID, not both or neither")
			}
			if tty {
				for _, fl := range []string{"background", "timeout", "json"} {
					if cmd.Flags().Changed(fl) {
						return usageErrorf("-t runs the command in this terminal until it ends: leave out --%s", fl)
					}
				}
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := apitype.CommandRequest{Cmd: shell, Argv: args[1:], Cwd: cwd, Background: background}
			var err error
			if req.Env, err = envFlag(env); err != nil {
				return err
			}
			if cmd.Flags().Changed("timeout") {
				ms := timeout.Milliseconds()
				if ms < 1 {
					return usageErrorf("--timeout %s is too short: give at least 1ms, e.g. --timeout 30s", timeout)
				}
				req.TimeoutMS = &ms
			}
			if stdin && !tty {
				b, err := io.ReadAll(o.env.Stdin)
				if err != nil {
					return fmt.Errorf("reading standard input: %w", err)
				}
				req.StdinBase64 = base64.StdEncoding.EncodeToString(b)
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			if tty {
				return o.terminal(cmd.Context(), c, f.agent, args[0], req)
			}
			var onEvent func(apitype.CommandEvent)
			if !f.json && !background {
				onEvent = o.printCommandOutput
			}
			res, err := c.Command(cmd.Context(), f.agent, args[0], req, onEvent)
			hint := shellLineHint(shell, args)
			if err != nil {
				if hint != "" && errors.Is(err, errclass.Invalid) {
					return fmt.Errorf("%w; %s", err, hint)
				}
				return err
			}
			if end := res.Process.End; hint != "" && end != nil && end.Outcome == apitype.OutcomeError && end.ExitCode == 127 && !f.json {
				fmt.Fprintf(o.env.Stderr, "sandpit: no program is named %s; %s\n", sandbox.ShellQuote(args[1:]), hint)
			}
			switch {
			case f.json:
				if err := o.printJSON(res); err != nil {
					return err
				}
			case background:
				fmt.Fprintln(o.env.Stdout, res.Process.ID)
				return nil
			}
			end := res.Process.End
			if end == nil {
				return nil
			}
			if end.Outcome != apitype.OutcomeOK && end.Outcome != apitype.OutcomeError && !f.json {
				fmt.Fprintf(o.env.Stderr, "sandpit: %s: %s\n", end.Outcome, sandbox.EscapeText(end.Reason))
			}
			return reportedRun(commandResult(end))
		},
	}
	f.register(cmd.Flags(), true)
	fl := cmd.Flags()
	fl.StringVarP(&shell, "cmd", "c", "", "a shell line, run with bash -lc")
	fl.StringVar(&cwd, "cwd", "", "working directory (default /home/user; relative paths start there)")
	fl.StringArrayVarP(&env, "env", "e", nil, "an environment variable NAME=VALUE, repeatable")
	fl.DurationVar(&timeout, "timeout", 0, "kill the command with every process it started after this long (default: the server's, 30s)")
	fl.BoolVarP(&stdin, "interactive", "i", false, "send standard input to the command")
	fl.BoolVar(&background, "background", false, "start it, print its process ID and return")
	fl.BoolVarP(&tty, "tty", "t", false, "run it in a terminal: this one, in raw mode, with its keys and size (as docker exec -it)")
	return cmd
}

// printCommandOutput prints a command's output event as it came: stdout on stdout, stderr on
// stderr (what the command writes is its own, as a local command's would be).
func (o *options) printCommandOutput(ev apitype.CommandEvent) {
	if ev.Dropped > 0 {
		fmt.Fprintf(o.env.Stderr, "sandpit: %d earlier bytes of %s were not kept\n", ev.Dropped, ev.Type)
	}
	switch ev.Type {
	case "stdout":
		io.WriteString(o.env.Stdout, ev.Data)
	case "stderr":
		io.WriteString(o.env.Stderr, ev.Data)
	}
}

// shellLineHint says to give a shell line with -c when `session exec ID WORD` was given one
// quoted word that reads as one (the daemon refuses it as a program's name, or the program
// cannot start: 127, as a shell says); "" otherwise.
func shellLineHint(shell string, args []string) string {
	if shell != "" || len(args) != 2 || !strings.ContainsAny(args[1], " ;|&<>$`") {
		return ""
	}
	return fmt.Sprintf("to run a shell line, give it with -c: sandpit session exec %s -c %s", args[0], sandbox.ShellQuote(args[1:]))
}

// commandExit is the exit status of a command that ended: its own, or 128 and the signal's
// number when a signal killed it.
func commandExit(end *apitype.ProcessEnd) int {
	if end.ExitCode >= 0 {
		return end.ExitCode
	}
	if n := signalNumber(end.Signal); n > 0 {
		return 128 + n
	}
	return 1
}

// commandResult is a command's end as a run's result, for ExitCode: a command a signal
// killed exits 128 and the signal's number, as a run does (it exited 130 for any signal).
func commandResult(end *apitype.ProcessEnd) apitype.Result {
	return apitype.Result{Outcome: end.Outcome, ExitCode: commandExit(end), Signal: signalNumber(end.Signal)}
}

// signalNumber is the number of the signal named name ("SIGKILL", or "signal 1" as the
// executor names those it has no name for), 0 for none or unknown.
func signalNumber(name string) int {
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "signal ")); err == nil && n > 0 && n < 65 {
		return n
	}
	return int(unix.SignalNum(name))
}

// sessionPath splits "ID:PATH" (a path in a session); ok is false for a local path.
func sessionPath(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(id, "se_") {
		return "", "", false
	}
	return id, path, true
}

func (o *options) sessionCpCommand() *cobra.Command {
	var (
		f       daemonFlags
		parents bool
	)
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a session (ID:PATH names a session's file)",
		Long: `Copy one file between this machine and a session: ID:PATH is a path in session ID (under
/home/user; relative paths start there), - is standard input or output. As cp does, a PATH
that is a directory (ID: or ID:. is the home; a trailing / says it is one) receives the file
under its own name. A file copied in is created or replaced (its parent directories made with
--parents); a failed copy changes nothing.`,
		Example: `  sandpit session cp data.csv se_...:            # /home/user/data.csv
  sandpit session cp data.csv se_...:in/ --parents
  sandpit session cp se_...:report.html .`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcIn := sessionPath(args[0])
			dstID, dstPath, dstIn := sessionPath(args[1])
			if srcIn == dstIn {
				return usageErrorf("exactly one of SRC and DST must be a session's path, ID:PATH (such as se_...:data.csv)")
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			if dstIn {
				var r io.Reader = o.env.Stdin
				if args[0] != "-" {
					file, err := os.Open(args[0])
					if err != nil {
						return usageErrorf("%v", err)
					}
					defer file.Close()
					if st, err := file.Stat(); err == nil && st.IsDir() {
						return usageErrorf("%s is a directory; sandpit session cp copies one file (a directory: tar it, copy the archive in, then sandpit session exec ID -- tar -xf NAME)", args[0])
					}
					r = file
				}
				dstPath, err = o.intoDirectory(cmd, c, f.agent, dstID, dstPath, args[0])
				if err != nil {
					return err
				}
				ent, err := c.WriteSessionFile(cmd.Context(), f.agent, dstID, dstPath, r, parents)
				if err != nil && !parents && errors.Is(err, errclass.NotFound) && strings.Contains(err.Error(), "its directory") {
					return fmt.Errorf("%w; add --parents to make the missing directories", err)
				}
				if err != nil {
					return err
				}
				if f.json {
					return o.printJSON(ent)
				}
				fmt.Fprintf(o.env.Stderr, "copied %d bytes to %s\n", ent.SizeBytes, ent.Path)
				return nil
			}
			return o.copyOut(cmd, c, f.agent, srcID, srcPath, args[1])
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "make the destination's missing parent directories")
	return cmd
}

// intoDirectory is where `session cp SRC ID:DST` writes, as cp(1) decides it: DST itself, or,
// when DST is a directory, the file named as SRC in it. DST is a directory when it says so
// (empty, ".", "..", or ending in "/": the home, or a directory that --parents may make) or
// when the session has a directory there. Standard input has no name to give the file.
func (o *options) intoDirectory(cmd *cobra.Command, c *client.Client, agent, id, dst, src string) (string, error) {
	isDir := dst == "" || strings.HasSuffix(dst, "/") || path.Base(dst) == "." || path.Base(dst) == ".."
	if !isDir {
		ent, err := c.StatSessionFile(cmd.Context(), agent, id, dst)
		switch {
		case errors.Is(err, errclass.NotFound):
		case err != nil:
			return "", err
		default:
			isDir = ent.Type == "dir"
		}
	}
	if !isDir {
		return dst, nil
	}
	if src == "-" {
		return "", usageErrorf("%s:%s is a directory, and standard input has no name to give the file: name it, such as %s:%s", id, dst, id, path.Join(dst, "data.csv"))
	}
	return path.Join(dst, filepath.Base(src)), nil
}

// copyOut copies a session's file to dst (a local path, or - for standard output), 32 MiB at a
// time.
func (o *options) copyOut(cmd *cobra.Command, c *client.Client, agent, id, path, dst string) error {
	ent, err := c.StatSessionFile(cmd.Context(), agent, id, path)
	if err != nil {
		return err
	}
	if ent.Type != "file" {
		return usageErrorf("%s is a %s; sandpit session cp copies one file", ent.Path, ent.Type)
	}
	var w io.Writer = o.env.Stdout
	var tmp *os.File
	if dst != "-" {
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, ent.Name)
		}
		dir := filepath.Dir(dst)
		if tmp, err = os.CreateTemp(dir, ".sandpit-cp-*"); errors.Is(err, fs.ErrNotExist) {
			return usageErrorf("the directory %s does not exist; make it first (mkdir -p %s)", dir, dir)
		} else if err != nil {
			return usageErrorf("%v", err)
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		w = tmp
	}
	const chunk = 32 << 20
	var n int64
	for off := int64(0); off < ent.SizeBytes || off == 0; off += chunk {
		b, err := c.ReadSessionFile(cmd.Context(), agent, id, ent.Path, off, min(chunk, max(ent.SizeBytes-off, 1)))
		if err != nil {
			return err
		}
		if _, err := io.Copy(w, bytes.NewReader(b)); err != nil {
			return err
		}
		n += int64(len(b))
		if len(b) < chunk {
			break
		}
	}
	if tmp == nil {
		return nil
	}
	// A new file's mode as cp gives it: 0666 less the umask (the temporary file was 0600).
	umask := unix.Umask(0)
	unix.Umask(umask)
	if err := tmp.Chmod(0o666 &^ fs.FileMode(umask)); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	// As a copy in says what it wrote (a new user's copy out said nothing).
	fmt.Fprintf(o.env.Stderr, "copied %d bytes to %s\n", n, dst)
	return nil
}

// sessionFilesList prints session id's directory path.
func (o *options) sessionFilesList(cmd *cobra.Command, f daemonFlags, depth int, id, path string) error {
	c, err := o.daemon(cmd, f)
	if err != nil {
		return err
	}
	l, err := c.ListSessionFiles(cmd.Context(), f.agent, id, path, depth)
	if api, ok := errors.AsType[*client.APIError](err); ok && (api.Status == http.StatusConflict || api.Status == http.StatusBadRequest) && path != "" {
		// A file or a symbolic link is listed as ls lists it: its own line (the daemon's
		// answer, 409 for a file and 400 for a link, pointed to stat, which the CLI does not
		// have). A path stat refuses too keeps the listing's error.
		if e, serr := c.StatSessionFile(cmd.Context(), f.agent, id, path); serr == nil && e.Type != "dir" {
			l, err = apitype.FileListing{Entries: []apitype.FileEntry{e}}, nil
		}
	}
	if err != nil {
		return err
	}
	if f.json {
		return o.printJSON(l)
	}
	tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tSIZE\tMODIFIED\tPATH")
	for _, e := range l.Entries {
		fmt.Fprintf(tw, "%s %s\t%d\t%s\t%s\n", e.Type[:1], e.Mode, e.SizeBytes, e.ModifiedAt.Local().Format(time.DateTime), entryName(e))
	}
	if l.Truncated {
		fmt.Fprintln(tw, "…\t\t\t(more entries than one listing holds)")
	}
	return tw.Flush()
}

func (o *options) sessionCommandsCommand() *cobra.Command {
	var (
		f      daemonFlags
		limit  int
		cursor string
	)
	cmd := &cobra.Command{
		Use:   "commands ID",
		Short: "List the commands a session ran, newest first (from the ledger: also once it has ended)",
		Long: `List the commands the ledger recorded for session ID as each ended, newest first: when each
started, how it ended (exit code or signal, outcome), how long it ran, what it wrote and its
command line (cut at 4096 bytes). Running ones are not listed until they end. The ledger keeps
them as long as it keeps executions.`,
		Example: `  sandpit session commands se_...
  sandpit session commands se_... --limit 10 --json`,
		Args: withSessionID(exactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > apitype.MaxLimit {
				return usageErrorf("--limit %d: give 1 to %d", limit, apitype.MaxLimit)
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			list, next, err := c.SessionCommands(cmd.Context(), f.agent, args[0], apitype.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(apitype.CommandList{Commands: list, NextCursor: next})
			}
			if len(list) == 0 && cursor == "" {
				fmt.Fprintf(o.env.Stdout, "session %s has recorded no commands\n", args[0])
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTARTED\tOUTCOME\tEXIT\tDURATION\tSTDOUT\tSTDERR\tCOMMAND")
			for _, p := range list {
				outcome, exit, dur := "-", "-", "-"
				if e := p.End; e != nil {
					outcome, exit, dur = string(e.Outcome), fmt.Sprint(e.ExitCode), fmt.Sprintf("%dms", e.DurationMS)
					if e.Signal != "" {
						exit = e.Signal
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", p.ID, p.StartedAt.Local().Format(time.DateTime), outcome, exit, dur,
					p.StdoutBytes, p.StderrBytes, commandLine(p))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(o.env.Stderr, "sandpit: more: add --cursor %s\n", next)
			}
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	cmd.Flags().StringVar(&cursor, "cursor", "", "the next_cursor of an earlier page (see --json)")
	return cmd
}

// commandLine is a recorded command's line for a table: one line of at most 80 bytes, escaped,
// marked when the ledger kept only its start.
func commandLine(p apitype.Process) string {
	if p.CommandTruncated {
		return oneLine(p.Command, 64) + " [cut at 4096 bytes]"
	}
	return oneLine(p.Command, 80)
}

// entryName is a listed file's path for the terminal: escaped (a session's file names are
// its programs' text and must not drive the terminal, as oneLine's), a directory's with "/",
// a symbolic link's with its target.
func entryName(e apitype.FileEntry) string {
	name := sandbox.EscapeName(e.Path)
	switch e.Type {
	case "dir":
		name += "/"
	case "symlink":
		name += " -> " + sandbox.EscapeName(e.Target)
	}
	return name
}

// envFlag is --env's NAME=VALUE list as a map (nil when empty).
func envFlag(list []string) (map[string]string, error) {
	var env map[string]string
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--env %q: give NAME=VALUE", kv)
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env, nil
}
