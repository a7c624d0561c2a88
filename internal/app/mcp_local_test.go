package app_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/cli"
	"github.com/sandpit-dev/sandpit/internal/testenv/logbuf"
)

// `sandpit mcp` with no daemon answering runs the engine in its own process and serves the
// tools over its REST handler in process (no port): a run comes back, and the ledger, read
// through the same tools, records it as source mcp. Closing stdin ends the command with 0.
func TestMCPOwnEngine(t *testing.T) {
	cfg := testConfig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := "http://" + ln.Addr().String() // a port nothing answers on once closed
	ln.Close()
	env := map[string]string{"SANDPIT_URL": nobody, "SANDPIT_DATA_DIR": cfg.DataDir,
		"SANDPIT_BASE_IMAGE": cfg.BaseImage, "SANDPIT_EXECUTOR_PATH": cfg.ExecutorPath}
	toCmd, stdin := io.Pipe()
	stdout, fromCmd := io.Pipe()
	stderr := &logbuf.Buffer{}
	exit := make(chan int, 1)
	go func() {
		code := cli.Main(context.Background(), []string{"mcp", "--agent", "frank"}, cli.Env{Stdin: toCmd, Stdout: fromCmd,
			Stderr: stderr, Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Version: "test"})
		fromCmd.Close()
		exit <- code
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if isErr, text := mcpRun(t, cs, "print(6 * 7)"); isErr || !strings.Contains(text, "42") {
		t.Fatalf("run_code on its own engine: %v %q", isErr, text)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_executions", Arguments: map[string]any{"source": "mcp"}})
	if err != nil || res.IsError {
		t.Fatalf("list_executions: %v %+v", err, res)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if !strings.Contains(text, `"agent":"frank"`) || !strings.Contains(text, `"source":"mcp"`) {
		t.Errorf("the ledger does not list frank's run as source mcp: %s", text)
	}
	cs.Close()
	stdin.Close()
	if code := <-exit; code != 0 {
		t.Errorf("sandpit mcp exited %d; stderr %q", code, stderr.String())
	}
}
