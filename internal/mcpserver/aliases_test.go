package mcpserver

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
)

// Issue 33, item 18: every alias names an argument its tool has and is none itself; and
// docs/api.md lists every tool's arguments and aliases.
func TestAliasesAndDocs(t *testing.T) {
	s := New(client.New("http://127.0.0.1:1", nil), "a", "test", apitype.Limits{})
	st1, st2 := mcp.NewInMemoryTransports()
	ss, err := s.Connect(t.Context(), st1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), st2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tool := range list.Tools {
		seen[tool.Name] = true
		raw, _ := json.Marshal(tool.InputSchema)
		var schema struct{ Properties map[string]any }
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatal(err)
		}
		args := make([]string, 0, len(schema.Properties))
		for name := range schema.Properties {
			args = append(args, name)
		}
		slices.Sort(args)
		for alias, name := range argAliases[tool.Name] {
			if !slices.Contains(args, name) || slices.Contains(args, alias) {
				t.Errorf("%s: alias %s of %s; its arguments are %v", tool.Name, alias, name, args)
			}
		}
		// The tool's row in docs/api.md: "| `name` | `arg`, `arg` ... |".
		row := ""
		for line := range strings.Lines(string(doc)) {
			if strings.HasPrefix(line, "| `"+tool.Name+"` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("docs/api.md has no row for tool %s", tool.Name)
			continue
		}
		for _, a := range args {
			if !strings.Contains(row, "`"+a+"`") {
				t.Errorf("docs/api.md's row of %s lacks its argument %s", tool.Name, a)
			}
		}
		for alias := range argAliases[tool.Name] {
			if !strings.Contains(row, "`"+alias+"`") {
				t.Errorf("docs/api.md's row of %s lacks its alias %s", tool.Name, alias)
			}
		}
	}
	for tool := range argAliases {
		if !seen[tool] {
			t.Errorf("aliases of %s, which is no tool", tool)
		}
	}
}

func TestRenamed(t *testing.T) {
	aliases := map[string]string{"session_id": "id"}
	for _, c := range []struct{ in, want string }{
		{`{"session_id":"se_1","code":"x"}`, `{"code":"x","id":"se_1"}`},
		{`{"id":"se_1","session_id":"se_2"}`, `{"id":"se_1","session_id":"se_2"}`}, // both: left for the schema to refuse
		{`{"id":"se_1"}`, `{"id":"se_1"}`},
		{`not json`, `not json`},
	} {
		if got := string(renamed(json.RawMessage(c.in), aliases)); got != c.want {
			t.Errorf("renamed(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}
