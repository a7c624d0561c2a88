package store

import (
	"fmt"
	"testing"
)

// The schema does not grow with the agents: a table (or index) per agent made storing each
// new agent's first memory slower than the last (found with a timing probe: 0.3 ms flat before
// per-agent FTS5 tables, 37 ms at 3000 agents with them), and any API client can name new
// agents at will. Counting schema objects catches the whole kind without timing anything.
func TestSchemaDoesNotGrowWithAgents(t *testing.T) {
	st := open(t)
	objects := func() int {
		var n int
		if err := st.r.QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := objects()
	for i := range 50 {
		agent := fmt.Sprintf("agent-%d", i)
		if _, err := st.AddMemories(t.Context(), agent, []Memory{{Text: "hello world"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddDocuments(t.Context(), agent, []Document{{ID: "d", Title: "t", Content: "hello"}}); err != nil {
			t.Fatal(err)
		}
		if m, err := st.SearchMemories(t.Context(), agent, "hello", 5); err != nil || len(m) != 1 {
			t.Fatalf("search of %s: %v %v", agent, m, err)
		}
	}
	if after := objects(); after != before {
		t.Fatalf("the schema has %d objects after 50 agents, %d before: something is made per agent", after, before)
	}
}
