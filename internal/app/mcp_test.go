package app_test

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/store"
)

func mcpRun(t *testing.T, cs *mcp.ClientSession, code string) (bool, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return res.IsError, text
}

// MCP against the real engine: streamable HTTP at the daemon's /mcp, and a `sandpit mcp`
// subprocess over stdio, each acting for its agent; the runs are in the ledger as source mcp.
func TestMCP(t *testing.T) {
	url, _ := startDaemon(t, testConfig(t))

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=dave"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if isErr, text := mcpRun(t, cs, "print(6 * 7)"); isErr || !strings.Contains(text, "stdout:\n42") {
		t.Fatalf("over HTTP: %v %q", isErr, text)
	}
	if isErr, text := mcpRun(t, cs, "1/0"); !isErr || !strings.Contains(text, "ZeroDivisionError") {
		t.Fatalf("a failing program over HTTP: %v %q", isErr, text)
	}

	bin := filepath.Join(t.TempDir(), "sandpit")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/sandpit-dev/sandpit/cmd/sandpit")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sandpit: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "mcp", "--agent", "erin")
	cmd.Env = append(os.Environ(), "SANDPIT_URL="+url)
	cmd.Stderr = os.Stderr
	cs2, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if isErr, text := mcpRun(t, cs2, "import pandas as pd; print(pd.DataFrame({'a': [1, 2]}).a.sum())"); isErr || !strings.Contains(text, "stdout:\n3") {
		t.Fatalf("over stdio: %v %q", isErr, text)
	}
	cs2.Close()

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sandpit_executions_total{outcome="ok",source="mcp"} 2`, `sandpit_executions_total{outcome="error",source="mcp"} 1`,
		"sandpit_slots 4", "sandpit_queue_depth 0", "sandpit_sandbox_resets_total 0", `sandpit_execution_duration_seconds_count{source="mcp"} 3`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	for _, agent := range []string{"dave", "erin"} {
		var list struct{ Executions []store.ExecutionSummary }
		if st := call(t, "GET", url+"/v1/executions?source=mcp&agent="+agent, "", &list); st != 200 || len(list.Executions) == 0 {
			t.Fatalf("%s's MCP runs in the ledger: %d %+v", agent, st, list)
		}
	}
}
