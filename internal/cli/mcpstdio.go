package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// mcpStdio stands between `sandpit mcp`'s standard input and output and the MCP SDK's
// transport, which reads one JSON-RPC message per line (the MCP spec's stdio transport):
//   - a line that is not JSON is answered with JSON-RPC's parse error (-32700, id null) and
//     skipped, where the SDK would end the connection (and the process) on it;
//   - the end of input reaches the server only once every request read has been answered (or
//     cancelled), so that a client that writes its requests and closes its end gets every
//     answer: the SDK ends the connection at the end of input, dropping those still running.
type mcpStdio struct {
	in  *bufio.Reader
	out io.Writer

	mu      sync.Mutex
	idle    *sync.Cond      // signalled when pending empties
	pending map[string]bool // IDs (idKey) of the requests read and not answered yet
	line    []byte          // what Read has yet to return of the current line
	n       int             // lines read
}

func newMCPStdio(in io.Reader, out io.Writer) *mcpStdio {
	s := &mcpStdio{in: bufio.NewReader(in), out: out, pending: map[string]bool{}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// rpcMessage holds the fields of a JSON-RPC message that mcpStdio follows.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"` // notifications/cancelled's
	} `json:"params"`
}

// messages decodes line, one JSON-RPC message or a batch of them; nil for neither.
func messages(line []byte) []rpcMessage {
	var batch []rpcMessage
	if json.Unmarshal(line, &batch) == nil {
		return batch
	}
	var m rpcMessage
	if json.Unmarshal(line, &m) == nil {
		return []rpcMessage{m}
	}
	return nil
}

// idKey is a JSON-RPC ID as one string whatever its spelling (1 and 1.0 are one ID); "" for
// none or null.
func idKey(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return ""
	}
	return fmt.Sprintf("%T:%v", v, v)
}

// Read gives the SDK the next line of JSON; at the end of input, io.EOF once nothing is
// pending.
func (s *mcpStdio) Read(p []byte) (int, error) {
	for len(s.line) == 0 {
		line, err := s.in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			s.take(line)
		}
		if err != nil && len(s.line) == 0 {
			s.mu.Lock()
			for len(s.pending) > 0 {
				s.idle.Wait()
			}
			s.mu.Unlock()
			return 0, err
		}
	}
	n := copy(p, s.line)
	s.line = s.line[n:]
	return n, nil
}

// take keeps line for Read, noting the requests it holds, or answers it with a parse error.
func (s *mcpStdio) take(line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	line = bytes.TrimSpace(line)
	if !json.Valid(line) {
		answer, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{
			"code": -32700, "message": fmt.Sprintf("Parse error: line %d of the input is not JSON; send one JSON-RPC message per line", s.n)}})
		_, _ = s.out.Write(append(answer, '\n'))
		return
	}
	for _, m := range messages(line) {
		switch {
		case m.Method == "notifications/cancelled":
			s.done(idKey(m.Params.RequestID))
		case m.Method != "":
			if id := idKey(m.ID); id != "" {
				s.pending[id] = true
			}
		}
	}
	s.line = append(line, '\n')
}

// done forgets the request id (answered or cancelled). s.mu is held.
func (s *mcpStdio) done(id string) {
	delete(s.pending, id)
	if len(s.pending) == 0 {
		s.idle.Broadcast()
	}
}

// Write writes what the SDK sends (one message or batch per call, ending in a newline),
// noting the requests it answers.
func (s *mcpStdio) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range messages(bytes.TrimSpace(p)) {
		if m.Method == "" {
			s.done(idKey(m.ID))
		}
	}
	return s.out.Write(p)
}

// Close does nothing: standard input and output are the process's.
func (s *mcpStdio) Close() error { return nil }
