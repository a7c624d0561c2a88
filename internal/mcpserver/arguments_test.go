package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/mcpserver"
)

// TestArgumentsInToolWords: arguments that do not fit a tool's inputSchema are refused in the
// tool's words, not the schema validator's ("validating root: unexpected additional
// properties"), and session_id is taken for id by the lifecycle tools, as docs/api.md says.
func TestArgumentsInToolWords(t *testing.T) {
	cs := connect(t, mcpserver.New(client.New("http://127.0.0.1:1", nil), "a", "test", apitype.Limits{}))
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_code", map[string]any{"code": "1", "bogus": 1}, `run_code has no argument "bogus"; tools/list gives`},
		{"run_code", map[string]any{"code": "1", "bogus": 1, "other": 2}, `run_code has no arguments "`},
		{"read_file", map[string]any{"id": "se_x"}, `read_file needs the argument "path"`},
		// A negative offset was read from the file's start.
		{"read_file", map[string]any{"id": "se_x", "path": "a.txt", "offset": -5}, "offset and length are counts of bytes: give 0 or more (offset is -5"},
		{"run_command", map[string]any{"id": "se_x", "cmd": "true", "timeout_ms": "abc"}, `run_command's argument "timeout_ms": abc has type "string", want "integer"`},
		// Neither content: a trial's file was emptied so.
		{"write_file", map[string]any{"id": "se_x", "path": "a.txt"}, `content is missing: give content (the file's text; "" for an empty file) or content_base64`},
		{"write_file", map[string]any{"id": "se_x", "path": "a.txt", "content": "", "content_base64": ""}, "give content or content_base64, not both"},
		// session_id, the alias, reaches the daemon (here none answers) as id.
		{"pause_session", map[string]any{"session_id": "se_x"}, "sandpit's API did not answer"},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		text := ""
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		if !res.IsError || !strings.Contains(text, c.want) || strings.Contains(text, "validating") {
			t.Errorf("%s %v: %q; want an error saying %q", c.tool, c.args, text, c.want)
		}
	}
}
