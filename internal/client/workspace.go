package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// A session's commands and files (POST …/sessions/{id}/commands, …/processes, …/files).

// Command runs req in agent's session id. With onEvent set (and req not in the background)
// the command's events stream to it as they come (NDJSON) and the answer is put together
// from them; otherwise the daemon answers whole.
func (c *Client) Command(ctx context.Context, agent, id string, req apitype.CommandRequest, onEvent func(apitype.CommandEvent)) (apitype.CommandResult, error) {
	path := agentPath(agent, "sessions", id, "commands")
	var out apitype.CommandResult
	if onEvent == nil || req.Background {
		err := c.call(ctx, http.MethodPost, path, req, &out)
		return out, err
	}
	resp, err := c.send(ctx, http.MethodPost, path, req, apitype.NDJSONContentType)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	var stdout, stderr strings.Builder
	err = commandStream(resp.Body, func(ev apitype.CommandEvent) bool {
		onEvent(ev)
		switch ev.Type {
		case "stdout":
			stdout.WriteString(ev.Data)
		case "stderr":
			stderr.WriteString(ev.Data)
		case "end":
			out.Process, out.Stdout, out.Stderr = *ev.Process, stdout.String(), stderr.String()
			return true
		}
		return false
	})
	return out, err
}

// ProcessOutput reads the output of process pid of agent's session id (GET
// …/processes/{pid}/output?tail=true), passing each "stdout" and "stderr" event to onEvent:
// first the latest output the sandbox kept (up to 64 KiB of each stream, of a background
// command only), then, with follow, what the process writes until it ends. Without follow it
// returns once the kept output is read (a process that has ended: at its end). It returns
// the process: as it ended, or without follow as it was when the output was read (End nil
// while it runs). A client too slow for the output is detached: an *APIError of code busy.
func (c *Client) ProcessOutput(ctx context.Context, agent, id, pid string, follow bool, onEvent func(apitype.CommandEvent)) (apitype.Process, error) {
	ctx, cancel := context.WithCancel(ctx) // without follow, the answer is left before its end
	defer cancel()
	resp, err := c.send(ctx, http.MethodGet, agentPath(agent, "sessions", id, "processes", pid, "output")+"?tail=true", nil, apitype.NDJSONContentType)
	if err != nil {
		return apitype.Process{}, err
	}
	defer resp.Body.Close()
	var (
		p     apitype.Process
		toEnd = follow
		kept  int // without follow, the events of kept output still to come
	)
	err = commandStream(resp.Body, func(ev apitype.CommandEvent) bool {
		switch ev.Type {
		case "start":
			p = *ev.Process
			if toEnd = toEnd || p.State != "running"; toEnd {
				return false
			}
			// The daemon sends what it kept right after the start, one event per stream that
			// wrote (only a background command's is kept), before anything newer.
			for _, n := range []int64{p.StdoutBytes, p.StderrBytes} {
				if p.Background && n > 0 {
					kept++
				}
			}
			return kept == 0
		case "stdout", "stderr":
			onEvent(ev)
			if !toEnd {
				kept--
				return kept == 0
			}
		case "end":
			p = *ev.Process
			return true
		}
		return false
	})
	return p, err
}

// commandStream reads a command's NDJSON events from r and passes each to each, until each
// answers true; an error line is returned as an *APIError, and an end of r before each
// answered true as an error wrapping io.ErrUnexpectedEOF.
func commandStream(r io.Reader, each func(apitype.CommandEvent) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l struct {
				apitype.CommandEvent
				Error *apitype.ErrorDetail `json:"error"`
			}
			if err := json.Unmarshal(line, &l); err != nil {
				return fmt.Errorf("reading the command's stream: bad line: %w", err)
			}
			if l.Error != nil {
				return &APIError{Status: http.StatusOK, Code: l.Error.Code, Message: l.Error.Message, Field: l.Error.Field}
			}
			if (l.Type == "start" || l.Type == "end") && l.Process == nil {
				return fmt.Errorf("reading the command's stream: a %q line without its process", l.Type)
			}
			if each(l.CommandEvent) {
				return nil
			}
		}
		if rerr == io.EOF {
			return fmt.Errorf("reading the command's stream: it ended before the command did: %w", io.ErrUnexpectedEOF)
		}
		if rerr != nil {
			return fmt.Errorf("reading the command's stream: %w", rerr)
		}
	}
}

// Processes lists agent's session id's processes.
func (c *Client) Processes(ctx context.Context, agent, id string) ([]apitype.Process, error) {
	var out apitype.ProcessList
	err := c.getJSON(ctx, agentPath(agent, "sessions", id, "processes"), &out)
	return out.Processes, err
}

// SessionCommands returns a page of the commands the ledger recorded for agent's session id
// as each ended, newest first, and the next page's cursor ("" after the last).
func (c *Client) SessionCommands(ctx context.Context, agent, id string, p apitype.Page) ([]apitype.Process, string, error) {
	var out apitype.CommandList
	err := c.call(ctx, http.MethodGet, agentPath(agent, "sessions", id, "commands")+query(pageQuery(p)), nil, &out)
	return out.Commands, out.NextCursor, err
}

// ProcessInput sends input to a process, closing its stdin after when in.Close is set.
func (c *Client) ProcessInput(ctx context.Context, agent, id, pid string, in apitype.ProcessInput) error {
	resp, err := c.send(ctx, http.MethodPost, agentPath(agent, "sessions", id, "processes", pid, "input"), in, "application/json")
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// SignalProcess sends a process a signal ("SIGTERM").
func (c *Client) SignalProcess(ctx context.Context, agent, id, pid, signal string) error {
	resp, err := c.send(ctx, http.MethodPost, agentPath(agent, "sessions", id, "processes", pid, "signal"), apitype.ProcessSignal{Signal: signal}, "application/json")
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// ResizeProcess sets the size of the terminal of a process started with a PTY.
func (c *Client) ResizeProcess(ctx context.Context, agent, id, pid string, size apitype.TermSize) error {
	resp, err := c.send(ctx, http.MethodPost, agentPath(agent, "sessions", id, "processes", pid, "resize"), size, "application/json")
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// WaitProcess waits until a process has ended and returns it.
func (c *Client) WaitProcess(ctx context.Context, agent, id, pid string) (apitype.Process, error) {
	var out apitype.Process
	err := c.call(ctx, http.MethodPost, agentPath(agent, "sessions", id, "processes", pid, "wait"), nil, &out)
	return out, err
}

func filesPath(agent, id string, parts ...string) string {
	return agentPath(agent, append([]string{"sessions", id, "files"}, parts...)...)
}

// ReadSessionFile reads a session's file: length bytes from offset (0: to the end; the daemon reads
// at most 32 MiB at once).
func (c *Client) ReadSessionFile(ctx context.Context, agent, id, path string, offset, length int64) ([]byte, error) {
	q := url.Values{"path": {path}}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if length > 0 {
		q.Set("length", strconv.FormatInt(length, 10))
	}
	resp, err := c.sendRaw(ctx, http.MethodGet, filesPath(agent, id)+"?"+q.Encode(), nil, "", "application/octet-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// WriteSessionFile creates or replaces a session's file with r's bytes (a raw body), making its parent
// directories when parents is set.
func (c *Client) WriteSessionFile(ctx context.Context, agent, id, path string, r io.Reader, parents bool) (apitype.FileEntry, error) {
	q := url.Values{"path": {path}, "parents": {strconv.FormatBool(parents)}}
	var out apitype.FileEntry
	resp, err := c.sendRaw(ctx, http.MethodPut, filesPath(agent, id)+"?"+q.Encode(), r, "application/octet-stream", "application/json")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, err
}

// ListSessionFiles lists a session's directory ("": its home), depth levels down.
func (c *Client) ListSessionFiles(ctx context.Context, agent, id, path string, depth int) (apitype.FileListing, error) {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out apitype.FileListing
	err := c.getJSON(ctx, filesPath(agent, id, "list")+"?"+q.Encode(), &out)
	return out, err
}

// StatSessionFile describes a session's path.
func (c *Client) StatSessionFile(ctx context.Context, agent, id, path string) (apitype.FileEntry, error) {
	var out apitype.FileEntry
	err := c.getJSON(ctx, filesPath(agent, id, "stat")+"?"+url.Values{"path": {path}}.Encode(), &out)
	return out, err
}
