package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/cli"
)

// chartCode draws a chart and shows it; a run with charts on returns it as figure-1.png. The
// runs of these tests get a long timeout: on a fresh engine of a busy machine the first import
// of matplotlib took more than the default 30 s (and the figure being written when the run was
// stopped came back empty).
const chartCode = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"

// pngHeader begins every PNG file.
var pngHeader = []byte("\x89PNG\r\n\x1a\n")

// checkPNG fails unless b is a PNG of a drawn figure (not an empty or tiny image).
func checkPNG(t *testing.T, what string, b []byte) {
	t.Helper()
	if !bytes.HasPrefix(b, pngHeader) || len(b) < 2000 {
		t.Fatalf("%s: %d bytes starting %q, want a PNG of a figure", what, len(b), b[:min(len(b), 8)])
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if r := img.Bounds(); r.Dx() < 200 || r.Dy() < 150 {
		t.Fatalf("%s: a %dx%d image, smaller than a figure", what, r.Dx(), r.Dy())
	}
}

// sandpitCLI runs the command line in this process with env's variables and returns its exit
// code, stdout and stderr.
func sandpitCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), args, cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Version: "test"})
	return code, stdout.String(), stderr.String()
}

// TestChartEndToEnd: `plt.plot([1,2]); plt.show()` through the real engine comes back as a
// PNG over the CLI (--output-dir, with an input file read by the code, through the daemon and
// with --local) and over MCP as image content.
func TestChartEndToEnd(t *testing.T) {
	cfg := testConfig(t)
	url, _ := startDaemon(t, cfg)
	dir := t.TempDir()
	data := filepath.Join(dir, "points.csv")
	if err := os.WriteFile(data, []byte("x,y\n1,3\n2,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := "import csv\nrows = list(csv.DictReader(open('in/points.csv')))\n" +
		"open('rows.txt', 'w').write(str(len(rows)))\n" + chartCode
	env := map[string]string{"SANDPIT_DATA_DIR": cfg.DataDir}

	out := filepath.Join(dir, "out")
	exit, stdout, stderr := sandpitCLI(t, env, "run", "-c", code, "--url", url, "--file", data+"=in/points.csv", "--output-dir", out, "--timeout", "3m")
	if exit != 0 {
		t.Fatalf("sandpit run: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
	}
	fig, err := os.ReadFile(filepath.Join(out, "figure-1.png"))
	if err != nil {
		t.Fatalf("%v; stderr %q", err, stderr)
	}
	checkPNG(t, "figure-1.png over the CLI", fig)
	if rows, _ := os.ReadFile(filepath.Join(out, "rows.txt")); string(rows) != "2" {
		t.Errorf("rows.txt = %q: the input file did not reach the code", rows)
	}
	if _, err := os.Stat(filepath.Join(out, "in", "points.csv")); err == nil {
		t.Error("the unchanged input file came back as an output file")
	}
	for _, line := range []string{"sandpit: output file figure-1.png (image/png", "sandpit: saved " + filepath.Join(out, "figure-1.png")} {
		if !strings.Contains(stderr, line) {
			t.Errorf("stderr %q lacks %q", stderr, line)
		}
	}

	// --no-charts: the figure is not saved.
	exit, _, stderr = sandpitCLI(t, env, "run", "-c", chartCode, "--url", url, "--no-charts", "--json", "--timeout", "3m")
	if exit != 0 || strings.Contains(stderr, "figure-1.png") {
		t.Errorf("--no-charts: exit %d, stderr %q", exit, stderr)
	}

	// MCP over the daemon's /mcp: the chart is image content.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=plotter"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": chartCode, "timeout_ms": 180000}})
	if err != nil {
		t.Fatal(err)
	}
	var images [][]byte
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" {
			images = append(images, img.Data) // the SDK decoded the base64 of the wire
		}
	}
	if res.IsError || len(images) != 1 {
		t.Fatalf("run_code over MCP: error %v, %d PNG images in %+v", res.IsError, len(images), res.Content)
	}
	checkPNG(t, "figure-1.png over MCP", images[0])

	// `sandpit exec files` fetches it again from the ledger.
	var run struct{ ID string }
	if b, err := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &run) != nil || run.ID == "" {
		t.Fatalf("no execution ID in %v", res.StructuredContent)
	}
	again := filepath.Join(dir, "again")
	exit, stdout, stderr = sandpitCLI(t, env, "exec", "files", run.ID, "--url", url, "--output-dir", again)
	if b, _ := os.ReadFile(filepath.Join(again, "figure-1.png")); exit != 0 || !bytes.Equal(b, images[0]) {
		t.Errorf("exec files: exit %d, stdout %q, stderr %q; the file is %d bytes, want those MCP got", exit, stdout, stderr, len(b))
	}
}

// TestChartLocal: `sandpit run --local` (the engine in the CLI's own process) hands the code
// its files and writes its chart with --output-dir.
func TestChartLocal(t *testing.T) {
	cfg := testConfig(t)
	env := map[string]string{"SANDPIT_DATA_DIR": cfg.DataDir, "SANDPIT_BASE_IMAGE": cfg.BaseImage, "SANDPIT_EXECUTOR_PATH": cfg.ExecutorPath}
	dir := t.TempDir()
	data := filepath.Join(dir, "n.txt")
	if err := os.WriteFile(data, []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code := "n = int(open('n.txt').read())\nopen('double.txt', 'w').write(str(2 * n))\n" + chartCode
	exit, stdout, stderr := sandpitCLI(t, env, "run", "--local", "-c", code, "--file", data, "--output-dir", out, "--timeout", "3m")
	if exit != 0 {
		t.Fatalf("sandpit run --local: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
	}
	fig, err := os.ReadFile(filepath.Join(out, "figure-1.png"))
	if err != nil {
		t.Fatalf("%v; stderr %q", err, stderr)
	}
	checkPNG(t, "figure-1.png with --local", fig)
	if b, _ := os.ReadFile(filepath.Join(out, "double.txt")); string(b) != "14" {
		t.Errorf("double.txt = %q", b)
	}
}
