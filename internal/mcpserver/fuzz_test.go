package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzToolArguments sends arbitrary JSON arguments to each tool through the SDK's client:
// every call ends in a tool result or a protocol error (never a crash or a hang), and a
// refused argument is named.
func FuzzToolArguments(f *testing.F) {
	for _, seed := range []struct{ tool, args string }{
		{"run_code", `{"code": "print(1)", "input": {"a": [1, 2]}, "timeout_ms": 1000, "dependencies": ["tinypkg==1.0"]}`},
		{"run_code", `{"code": 5}`},
		{"run_code", `{"code": "x", "timeout_ms": -1}`},
		{"run_code", `{"code": "x", "dependencies": ["--index-url=http://evil"]}`},
		{"save_code", `{"name": "Bad Name", "code": "x"}`},
		{"save_code", `{"name": "ok", "code": "x", "input_schema": {"$ref": "#"}}`},
		{"update_code", `{"name": "ok", "expected_version": 99}`},
		{"run_saved_code", `{"name": "nope", "input": null}`},
		{"create_code_job", `{"code_name": "ok", "schedule": "TZ= * * * * *"}`},
		{"create_code_job", `{"code_name": "ok", "schedule": "@every 1s", "timezone": "Mars/Base"}`},
		{"update_code_job", `{"id": "job_x", "enabled": "yes"}`},
		{"list_executions", `{"limit": 100000, "outcome": "great"}`},
		{"list_executions", `{"since": "2026-01-02T15:04:05Z", "until": "2026-01-01T00:00:00Z", "cursor": "!!"}`},
		{"get_code_job_history", `{"id": "job_x", "since": "yesterday", "limit": -3, "cursor": "zz"}`},
		{"get_execution", `{"id": "../../etc/passwd"}`},
		{"delete_code", `{"name": "", "force": true}`},
		{"list_code", `{"query": "\u0000"}`},
	} {
		f.Add(seed.tool, seed.args)
	}
	cs := connectAs(f, "fuzz")
	tools := map[string]bool{}
	list, err := cs.ListTools(f.Context(), nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, t := range list.Tools {
		tools[t.Name] = true
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		if !tools[tool] {
			return
		}
		var m map[string]any
		if json.Unmarshal([]byte(args), &m) != nil {
			return
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: m})
		if err != nil {
			if cs.Ping(t.Context(), nil) != nil {
				t.Fatalf("%s %s broke the connection: %v", tool, args, err)
			}
			return
		}
		if res.IsError && len(res.Content) == 0 {
			t.Fatalf("%s %s: an error result without a message", tool, args)
		}
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok && res.IsError && strings.TrimSpace(tc.Text) == "" {
				t.Fatalf("%s %s: an empty error message", tool, args)
			}
		}
	})
}
