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
	var stdout, stderr bytes.Buffer
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l struct {
				apitype.CommandEvent
				Error *apitype.ErrorDetail `json:"error"`
			}
			if err := json.Unmarshal(line, &l); err != nil {
				return out, fmt.Errorf("reading the command's stream: bad line: %w", err)
			}
			if l.Error != nil {
				return out, &APIError{Status: http.StatusOK, Code: l.Error.Code, Message: l.Error.Message, Field: l.Error.Field}
			}
			onEvent(l.CommandEvent)
			switch l.Type {
			case "stdout":
				stdout.WriteString(l.Data)
			case "stderr":
				stderr.WriteString(l.Data)
			case "end":
				out.Process, out.Stdout, out.Stderr = *l.Process, stdout.String(), stderr.String()
				return out, nil
			}
		}
		if rerr == io.EOF {
			return out, fmt.Errorf("reading the command's stream: it ended before the command did: %w", io.ErrUnexpectedEOF)
		}
		if rerr != nil {
			return out, fmt.Errorf("reading the command's stream: %w", rerr)
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
