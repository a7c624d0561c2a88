package mcpserver_test

import (
	"strings"
	"testing"
)

// TestBadLimit: a listing tool's bad limit is refused in the tool's own words (its default is
// 20, not REST's 50).
func TestBadLimit(t *testing.T) {
	cs := connectAs(t, "alice")
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"list_commands", map[string]any{"id": "se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "limit": 501}},
		{"list_commands", map[string]any{"id": "se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "limit": -1}},
		{"list_executions", map[string]any{"limit": 501}},
	} {
		res, text := callTool(t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text, "from 1 to 500 (default 20)") {
			t.Errorf("%s %v: %v %s", c.tool, c.args, res.IsError, text)
		}
	}
}
