package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

const runCommandDoc = `Run a shell command in a session started with create_session: bash -lc cmd, as the session's user, in its home /home/user (the directory its Python calls run in: files are shared both ways), under its limits and network policy. Use it for git, unzip, grep, sqlite3, curl, pip install (installs into the session: importable in its next run_in_session call). Answers stdout, stderr, exit_code and outcome (ok, error, timeout: killed with every process it started after timeout_ms, output_limit). background: true starts it and answers its process id at once (a server, a long job); it runs until it ends or the session does.`

const readFileDoc = `Read a file of a session (a path under /home/user; relative paths start there). Answers its text (or base64 for binary bytes), its size, and a range when offset or length are given (at most 32 MiB at once). Paths outside /home/user, symbolic links, FIFOs and devices are refused.`

const writeFileDoc = `Write a file into a session (a path under /home/user; relative paths start there): created or replaced, with missing parent directories made. content is text; content_base64 bytes instead. The session's Python calls and commands see it at once.`

const listFilesDoc = `List a directory of a session (default /home/user): name, type (file, dir, symlink), size and modification time of each entry, depth levels down (default 1).`

const listCommandsDoc = `List the commands a session ran (run_command, foreground and background), newest first, as the ledger recorded each when it ended: its command line, exit_code, signal, outcome, duration and bytes written. Running ones are not listed until they end. Works after the session ended too, while the ledger keeps them. A next_cursor in the answer gets the next page (pass it as cursor).`

// RunCommandArgs are run_command's arguments.
type RunCommandArgs struct {
	ID         string            `json:"id" jsonschema:"the session's id (se_...), from create_session"`
	Cmd        string            `json:"cmd" jsonschema:"the command line, run with bash -lc, such as 'ls -la data'"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"working directory (default /home/user)"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	TimeoutMS  int64             `json:"timeout_ms,omitempty" jsonschema:"kill it (and every process it started) after this many milliseconds (default 30000)"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text written to its standard input"`
	Background bool              `json:"background,omitempty" jsonschema:"start it and answer its process id at once"`
}

// ReadFileArgs are read_file's arguments.
type ReadFileArgs struct {
	ID     string `json:"id" jsonschema:"the session's id (se_...)"`
	Path   string `json:"path" jsonschema:"a path under /home/user (relative paths start there)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"first byte to read"`
	Length int64  `json:"length,omitempty" jsonschema:"bytes to read (default: to the end)"`
}

// WriteFileArgs are write_file's arguments.
type WriteFileArgs struct {
	ID            string  `json:"id" jsonschema:"the session's id (se_...)"`
	Path          string  `json:"path" jsonschema:"a path under /home/user (relative paths start there)"`
	Content       *string `json:"content,omitempty" jsonschema:"the file's text (\"\" for an empty file)"`
	ContentBase64 *string `json:"content_base64,omitempty" jsonschema:"the file's bytes, base64 (instead of content)"`
}

// ListFilesArgs are list_files's arguments.
type ListFilesArgs struct {
	ID    string `json:"id" jsonschema:"the session's id (se_...)"`
	Path  string `json:"path,omitempty" jsonschema:"a directory (default /home/user)"`
	Depth int    `json:"depth,omitempty" jsonschema:"levels to list (default 1)"`
}

// ListCommandsArgs are list_commands's arguments.
type ListCommandsArgs struct {
	ID     string `json:"id" jsonschema:"the session's id (se_...)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many (default 20, up to 500)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next_cursor of the previous answer, for the next page"`
}

// addWorkspaceTools adds the tools of a session's commands and files to s.
func addWorkspaceTools(s *mcp.Server, t *tools) {
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: runCommandDoc}, t.runCommand)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Description: readFileDoc}, t.readSessionFile)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Description: writeFileDoc}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Description: listFilesDoc}, t.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "list_commands", Description: listCommandsDoc}, t.listCommands)
}

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, a RunCommandArgs) (*mcp.CallToolResult, any, error) {
	req := apitype.CommandRequest{Cmd: a.Cmd, Cwd: a.Cwd, Env: a.Env, Stdin: a.Stdin, Background: a.Background}
	if a.TimeoutMS != 0 && !a.Background {
		req.TimeoutMS = &a.TimeoutMS
	}
	res, err := t.c.Command(ctx, t.agent, a.ID, req, nil)
	if err != nil {
		return nil, nil, toolError(err)
	}
	out := map[string]any{"process_id": res.Process.ID, "pid": res.Process.PID}
	if a.Background {
		out["state"] = res.Process.State
		return nil, out, nil
	}
	out["stdout"], out["stderr"] = res.Stdout, res.Stderr
	if e := res.Process.End; e != nil {
		out["exit_code"], out["outcome"] = e.ExitCode, e.Outcome
		if e.Reason != "" {
			out["reason"] = e.Reason
		}
		if e.Signal != "" {
			out["signal"] = e.Signal
		}
	}
	return nil, out, nil
}

func (t *tools) readSessionFile(ctx context.Context, _ *mcp.CallToolRequest, a ReadFileArgs) (*mcp.CallToolResult, any, error) {
	if a.Offset < 0 || a.Length < 0 {
		return nil, nil, fmt.Errorf("offset and length are counts of bytes: give 0 or more (offset is %d, length %d)", a.Offset, a.Length)
	}
	data, err := t.c.ReadSessionFile(ctx, t.agent, a.ID, a.Path, a.Offset, a.Length)
	if err != nil {
		return nil, nil, toolError(err)
	}
	out := map[string]any{"path": a.Path, "bytes": len(data)}
	if utf8.Valid(data) {
		out["content"] = string(data)
	} else {
		out["content_base64"] = base64.StdEncoding.EncodeToString(data)
	}
	return nil, out, nil
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, a WriteFileArgs) (*mcp.CallToolResult, any, error) {
	var data []byte
	switch {
	case a.Content != nil && a.ContentBase64 != nil:
		return nil, nil, fmt.Errorf("give content or content_base64, not both")
	case a.Content != nil:
		data = []byte(*a.Content)
	case a.ContentBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*a.ContentBase64)
		if err != nil {
			return nil, nil, fmt.Errorf("content_base64 is not standard base64: %w", err)
		}
		data = b
	default: // not an empty file: a call without either would have emptied one that existed
		return nil, nil, fmt.Errorf(`content is missing: give content (the file's text; "" for an empty file) or content_base64`)
	}
	ent, err := t.c.WriteSessionFile(ctx, t.agent, a.ID, a.Path, strings.NewReader(string(data)), true)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, ent, nil
}

func (t *tools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, a ListFilesArgs) (*mcp.CallToolResult, any, error) {
	l, err := t.c.ListSessionFiles(ctx, t.agent, a.ID, a.Path, a.Depth)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, l, nil
}

func (t *tools) listCommands(ctx context.Context, _ *mcp.CallToolRequest, a ListCommandsArgs) (*mcp.CallToolResult, any, error) {
	page, err := toolPage(a.Limit, a.Cursor)
	if err != nil {
		return nil, nil, err
	}
	list, next, err := t.c.SessionCommands(ctx, t.agent, a.ID, page)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, apitype.CommandList{Commands: list, NextCursor: next}, nil
}
