package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/cli"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "sandpit" { // the CLI, as the docs' examples call it (docs_test.go)
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
			Lookup: os.LookupEnv, Version: testVersion}))
	}
	os.Exit(testenv.Main(m))
}

func testConfig(t testing.TB) config.Config {
	t.Helper()
	return testConfigAt(t, t.TempDir())
}

// testConfigAt is testConfig on data directory dir; the containers and volumes of dir are
// removed when the test ends (the E2B tests set DataDir after testConfig, and their
// containers outlived CI's tests).
func testConfigAt(t testing.TB, dir string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.BaseImage = testenv.BaseImage(t)
	cfg.ExecutorPath = testenv.Executor(t)
	cfg.Listen = "127.0.0.1:0"
	cfg.UIDBlock = int(testenv.UIDBlock(t))
	// No E2B warm pool and no warm session container: their containers would count in the
	// tests of slots and sessions. The E2B tests ask for a pool (e2bDaemon); the warm session
	// containers are the Docker runtime's tests' (warm_test.go) and TestWarmSessionREST's.
	cfg.E2BPool, cfg.WarmSessions = 0, 0
	testenv.RemoveContainers(t, cfg.DataDir)
	return cfg
}

// allReady waits until every slot of eng's pool is up: an engine is ready with slot 0.
func allReady(t testing.TB, eng *app.Core) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := eng.Runtime.AllReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitMetric waits, up to within, until the /metrics page of the daemon at base holds text
// (a line, or its start), and fails the test with the last page (or error) when it does not.
func waitMetric(t *testing.T, base, text string, within time.Duration) {
	t.Helper()
	var page []byte
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var resp *http.Response
		if resp, err = http.Get(base + "/metrics"); err != nil {
			continue
		}
		page, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(page), text) {
			return
		}
	}
	t.Fatalf("no %q in /metrics within %s (%v); the last page:\n%s", strings.TrimSpace(text), within, err, page)
}

// waitContainers waits up to a minute for n containers of dataDir to exist.
func waitContainers(t testing.TB, dataDir string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); len(testenv.Containers(t, dataDir)) < n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d containers for %s after a minute, want %d", len(testenv.Containers(t, dataDir)), dataDir, n)
		}
	}
}

// daemon runs app.Serve until the test ends and returns its base URL.
func daemon(t testing.TB, cfg config.Config) string {
	t.Helper()
	url, _ := startDaemon(t, cfg)
	return url
}

func post(t *testing.T, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/executions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		inLedger(t, url, b)
	}
	return resp, b
}

// inLedger checks that the result in answer (a JSON result or an NDJSON stream ending in one)
// is in the ledger, byte for byte.
func inLedger(t *testing.T, url string, answer []byte) {
	t.Helper()
	var res sandbox.Result
	if err := json.Unmarshal(answer, &res); err != nil || res.ID == "" {
		for line := range bytes.Lines(answer) {
			var l struct {
				Type   string          `json:"type"`
				Result *sandbox.Result `json:"result"`
			}
			if json.Unmarshal(line, &l) == nil && l.Type == "result" {
				res = *l.Result
			}
		}
	}
	if res.ID == "" {
		return // not a result (an error line)
	}
	resp, err := http.Get(url + "/v1/executions/" + res.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rec struct {
		sandbox.Result
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil || resp.StatusCode != 200 {
		t.Fatalf("execution %s is not in the ledger: %d %v", res.ID, resp.StatusCode, err)
	}
	if rec.Status != "finished" || rec.Outcome != res.Outcome || rec.Stdout != res.Stdout || rec.Stderr != res.Stderr ||
		rec.ExitCode != res.ExitCode || !bytes.Equal(compact(rec.Output), compact(res.Output)) {
		t.Fatalf("the ledger's record of %s differs from the answer:\nledger %+v\nanswer %+v", res.ID, rec.Result, res)
	}
}

func compact(v json.RawMessage) []byte {
	var buf bytes.Buffer
	_ = json.Compact(&buf, v)
	return buf.Bytes()
}

func TestREST(t *testing.T) {
	url := daemon(t, testConfig(t))

	t.Run("main job: pandas and OUTPUT", func(t *testing.T) {
		resp, body := post(t, url, `{"code": "import pandas as pd\nprint(pd.DataFrame({'a': INPUT}).a.sum())\nOUTPUT = {'n': len(INPUT)}", "input": [1, 2, 3]}`)
		var res sandbox.Result
		if err := json.Unmarshal(body, &res); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var out struct{ N int }
		if res.Outcome != sandbox.OutcomeOK || res.Stdout != "6\n" || json.Unmarshal(res.Output, &out) != nil || out.N != 3 {
			t.Fatalf("result %s", body)
		}
	})

	t.Run("H24 UTF-8 byte-exact in JSON and the stream", func(t *testing.T) {
		_, body := post(t, url, `{"code": "print('测试 😀')"}`)
		if !bytes.Contains(body, []byte(`"stdout":"测试 😀\n"`)) {
			t.Fatalf("JSON body %s", body)
		}
		_, stream := post(t, url, `{"code": "print('测试 😀')"}`, "Accept", "application/x-ndjson")
		var streamed strings.Builder
		for line := range bytes.Lines(stream) {
			var ev struct{ Type, Data string }
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Fatalf("stream line %q: %v", line, err)
			}
			if ev.Type == "stdout" {
				streamed.WriteString(ev.Data)
			}
		}
		if streamed.String() != "测试 😀\n" || !bytes.Contains(stream, []byte(`"stdout":"测试 😀\n"`)) {
			t.Fatalf("stream %s", stream)
		}
	})

	t.Run("H15 bad requests are 400 naming the field and nothing runs", func(t *testing.T) {
		marker := "/tmp/h15-ran"
		run := fmt.Sprintf("open('%s', 'w').write('x')", marker)
		cases := []struct{ body, field, says string }{
			{`{"code": "` + run + `", "timeout_ms": 0}`, "timeout_ms", "1 to 600000"},
			{`{"code": "` + run + `", "timeout_ms": -5}`, "timeout_ms", "1 to 600000"},
			{`{"code": "` + run + `", "timeout_ms": 864000000}`, "timeout_ms", "1 to 600000"},
			{`{"code": "` + run + `", "tiemout_ms": 5}`, "tiemout_ms", "unknown field"},
			{`{"input": 1}`, "code", "required"},
			{`print(1)`, "", "JSON"},
		}
		for _, c := range cases {
			resp, body := post(t, url, c.body)
			var e struct {
				Error struct{ Code, Message, Field string }
			}
			if resp.StatusCode != 400 || json.Unmarshal(body, &e) != nil || e.Error.Field != c.field || !strings.Contains(e.Error.Message, c.says) {
				t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
			}
		}
		_, body := post(t, url, fmt.Sprintf(`{"code": "import os; print(os.path.exists('%s'))"}`, marker))
		if !bytes.Contains(body, []byte(`"stdout":"False\n"`)) {
			t.Fatalf("a refused request ran: %s", body)
		}
	})

	t.Run("H16 50 MiB code is 413 before the body is read", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/executions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 50<<20)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer before the body was sent: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "limit") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})

	t.Run("web pages and rebound names are refused", func(t *testing.T) {
		for _, h := range [][]string{{"Origin", "http://evil.example"}, {"Host", "attacker.example"}} {
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/executions", strings.NewReader(`{"code": "print(1)"}`))
			req.Header.Set(h[0], h[1])
			if h[0] == "Host" {
				req.Host = h[1]
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s: status %d, want 403", h[0], h[1], resp.StatusCode)
			}
		}
	})

	t.Run("readyz", func(t *testing.T) {
		resp, err := http.Get(url + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("readyz %v %v", resp, err)
		}
		resp.Body.Close()
	})

	t.Run("H9 100 concurrent requests on 4 slots", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		counts := map[string]int{}
		for range 100 {
			wg.Go(func() {
				resp, err := http.Post(url+"/v1/executions", "application/json", strings.NewReader(`{"code": "print(1)"}`))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					counts["connection error: "+err.Error()]++
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				switch {
				case resp.StatusCode == 200 && bytes.Contains(body, []byte(`"outcome":"ok"`)):
					counts["ok"]++
				case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "":
					counts["429"]++
				default:
					counts[fmt.Sprintf("%d %s", resp.StatusCode, body)]++
				}
			})
		}
		wg.Wait()
		if counts["ok"]+counts["429"] != 100 || counts["ok"] == 0 {
			t.Fatalf("answers: %v", counts)
		}
		t.Logf("answers: %v", counts)
	})

	t.Run("CLI against the daemon", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		env := cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) {
				if k == "SANDPIT_URL" {
					return url, true
				}
				return os.LookupEnv(k)
			}}
		code := cli.Main(context.Background(), []string{"run", "-c", "import sys; print('测试 😀'); print('warn', file=sys.stderr); sys.exit(3)"}, env)
		if code != 3 || stdout.String() != "测试 😀\n" || stderr.String() != "warn\n" {
			t.Fatalf("exit %d stdout %q stderr %q", code, stdout.String(), stderr.String())
		}
		stdout.Reset()
		stderr.Reset()
		code = cli.Main(context.Background(), []string{"run", "-c", "while True: pass", "--timeout", "1s"}, env)
		if code != 124 || !strings.Contains(stderr.String(), "timeout") {
			t.Fatalf("timeout: exit %d stderr %q", code, stderr.String())
		}
		stdout.Reset()
		code = cli.Main(context.Background(), []string{"run", "-c", "OUTPUT = {'n': len(INPUT)}", "--input", "[1,2,3]", "--json"}, env)
		var res struct{ Output struct{ N int } }
		if code != 0 || json.Unmarshal(stdout.Bytes(), &res) != nil || res.Output.N != 3 {
			t.Fatalf("--json: exit %d %s", code, stdout.String())
		}
		// Engine flags cannot apply to a daemon that is already running: refused, not ignored.
		stderr.Reset()
		code = cli.Main(context.Background(), []string{"run", "--network", "none", "-c", "print(1)"}, env)
		if code != 64 || !strings.Contains(stderr.String(), "--network") || !strings.Contains(stderr.String(), "--local") {
			t.Fatalf("--network with a daemon: exit %d stderr %q", code, stderr.String())
		}
		// The same settings from the environment: network none is refused, limits are warned about.
		withEnv := func(k, v string) cli.Env {
			e := env
			e.Lookup = func(key string) (string, bool) {
				if key == k {
					return v, true
				}
				return env.Lookup(key)
			}
			return e
		}
		stderr.Reset()
		if code := cli.Main(context.Background(), []string{"run", "-c", "print(1)"}, withEnv("SANDPIT_NETWORK", "none")); code != 64 ||
			!strings.Contains(stderr.String(), `network "none"`) {
			t.Fatalf("SANDPIT_NETWORK=none with a daemon: exit %d stderr %q", code, stderr.String())
		}
		stderr.Reset()
		if code := cli.Main(context.Background(), []string{"run", "-c", "print(1)"}, withEnv("SANDPIT_STDOUT_BYTES", "10")); code != 0 ||
			!strings.Contains(stderr.String(), "stdout_bytes 10 (the daemon's: 1048576)") {
			t.Fatalf("SANDPIT_STDOUT_BYTES=10 with a daemon: exit %d stderr %q", code, stderr.String())
		}
		// The ledger's table says how each run started, its exit code and a line of its output.
		stdout.Reset()
		if code := cli.Main(context.Background(), []string{"exec", "list", "--limit", "3"}, env); code != 0 ||
			!strings.Contains(strings.SplitN(stdout.String(), "\n", 2)[0], "START") || !strings.Contains(strings.SplitN(stdout.String(), "\n", 2)[0], "EXIT") ||
			!regexp.MustCompile(` (fork|cold) +(1|-)\n`).MatchString(stdout.String()) {
			t.Fatalf("exec list: exit %d stdout %q", code, stdout.String())
		}
	})
}

func TestOneEnginePerDataDir(t *testing.T) {
	cfg := testConfig(t)
	eng, err := app.Open(context.Background(), cfg, testenv.Logger(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	allReady(t, eng)
	_, err = app.Open(context.Background(), cfg, testenv.Logger(), io.Discard)
	var locked *datadir.LockedError
	if !errors.As(err, &locked) || locked.PID != os.Getpid() {
		t.Fatalf("second engine on the same data directory: %v", err)
	}
	// The CLI says who owns it and how to reach it.
	var stderr bytes.Buffer
	code := cli.Main(context.Background(), []string{"run", "--local", "--data-dir", cfg.DataDir, "--base-image", cfg.BaseImage, "-c", "print(1)"},
		cli.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Lookup: func(k string) (string, bool) {
			if k == "SANDPIT_EXECUTOR_PATH" {
				return cfg.ExecutorPath, true
			}
			return "", false
		}})
	if code != 75 || !strings.Contains(stderr.String(), "in use by sandpit process") {
		t.Fatalf("exit %d stderr %q", code, stderr.String())
	}
	// Its container cannot be removed from under it; once it is closed, it can.
	if _, err := app.RemoveSandbox(context.Background(), cfg, false); !errors.As(err, &locked) {
		t.Fatalf("RemoveSandbox while in use: %v", err)
	}
	eng.Close()
	if got, err := app.RemoveSandbox(context.Background(), cfg, false); err != nil || got.Containers != cfg.Slots || got.Volume != "" || got.Kept != docker.VolumeName(cfg.DataDir) {
		t.Fatalf("RemoveSandbox: %+v %v", got, err)
	}
	if ids := testenv.Containers(t, cfg.DataDir); len(ids) != 0 {
		t.Fatalf("containers left: %v", ids)
	}
	// Issue 33, item 16: with the volume too, nothing of the data directory is left in the
	// engine (its package volume was left by every data directory).
	api := testenv.DockerClient(t)
	vol := docker.VolumeName(cfg.DataDir)
	if _, err := api.VolumeInspect(context.Background(), vol, client.VolumeInspectOptions{}); err != nil {
		t.Fatalf("the package volume before: %v", err)
	}
	if got, err := app.RemoveSandbox(context.Background(), cfg, true); err != nil || got.Containers != 0 || got.Volume != vol {
		t.Fatalf("RemoveSandbox with the volume: %+v %v", got, err)
	}
	if _, err := api.VolumeInspect(context.Background(), vol, client.VolumeInspectOptions{}); err == nil {
		t.Fatalf("the package volume %s is left", vol)
	}
	// Once it is gone, none is said to be removed (a forced removal of a missing volume
	// answers success, and `sandbox rm --all` said it removed it).
	if got, err := app.RemoveSandbox(context.Background(), cfg, true); err != nil || got != (app.Removed{}) {
		t.Fatalf("RemoveSandbox of nothing: %+v %v", got, err)
	}
}

// TestOneOffRunStartsOneContainer: without a daemon, `sandpit run` starts one container, not
// a slot's for each of the configuration's slots (it left four running after every command),
// says in one line that it stays and how to remove it, and the next run adopts it warm.
func TestOneOffRunStartsOneContainer(t *testing.T) {
	cfg := testConfig(t)
	env := func(stdout, stderr *bytes.Buffer) cli.Env {
		return cli.Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr, Lookup: func(k string) (string, bool) {
			switch k {
			case "SANDPIT_EXECUTOR_PATH":
				return cfg.ExecutorPath, true
			case "SANDPIT_SLOTS":
				return "4", true
			}
			return "", false
		}}
	}
	var first []string
	for i := range 2 {
		var stdout, stderr bytes.Buffer
		code := cli.Main(context.Background(), []string{"run", "--url", "http://127.0.0.1:1", "--data-dir", cfg.DataDir, "--base-image", cfg.BaseImage,
			"-c", "print(1)"}, env(&stdout, &stderr))
		if code != 0 || stdout.String() != "1\n" {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, code, stdout.String(), stderr.String())
		}
		if !strings.Contains(stderr.String(), "its one container stays up for the next run: `sandpit sandbox rm` removes it") {
			t.Errorf("run %d: stderr %q does not say what stays and how to remove it", i, stderr.String())
		}
		ids := testenv.Containers(t, cfg.DataDir)
		if len(ids) != 1 {
			t.Fatalf("run %d left %d containers, want 1: %v", i, len(ids), ids)
		}
		if i == 0 {
			first = ids
		} else if ids[0] != first[0] {
			t.Errorf("the second run made container %s, want the first's %s adopted", ids[0], first[0])
		}
	}
}

// TestSandboxRmSaysOnlyWhatItDid: `sandbox rm --all` of a data directory that made nothing in
// the engine says there was nothing to remove (it said it removed 0 containers and a package
// volume that never existed).
func TestSandboxRmSaysOnlyWhatItDid(t *testing.T) {
	cfg := testConfig(t)
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), []string{"sandbox", "rm", "--all", "--data-dir", cfg.DataDir}, cli.Env{Stdin: strings.NewReader(""),
		Stdout: &stdout, Stderr: &stderr, Lookup: func(string) (string, bool) { return "", false }})
	if want := "data directory " + cfg.DataDir + " has no containers to remove\nno package volume to remove\n"; code != 0 || stdout.String() != want {
		t.Fatalf("sandbox rm --all: exit %d, stdout %q, stderr %q; want %q", code, stdout.String(), stderr.String(), want)
	}
}

// The data directory is one, however it is spelt: a symlink or a trailing slash adopts the
// same containers.
func TestDataDirSpellingsShareOneContainer(t *testing.T) {
	cfg := testConfig(t)
	link := cfg.DataDir + "-link"
	if err := os.Symlink(cfg.DataDir, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	for _, dir := range []string{cfg.DataDir, cfg.DataDir + "/", link} {
		c := cfg
		c.DataDir = dir
		eng, err := app.Open(context.Background(), c, testenv.Logger(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		allReady(t, eng)
		eng.Close()
	}
	if ids := testenv.Containers(t, cfg.DataDir); len(ids) != cfg.Slots {
		t.Fatalf("%d containers for one data directory, want one per slot (%d)", len(ids), cfg.Slots)
	}
}

func TestDaemonRestartAdoptsContainer(t *testing.T) {
	cfg := testConfig(t)
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		addr := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- app.Serve(ctx, cfg, testVersion, testenv.Logger(), io.Discard, func(a string) { addr <- a })
		}()
		select {
		case <-addr:
		case err := <-done:
			t.Fatal(err)
		}
		// Ready with slot 0; the others follow. Wait until every slot's container runs: one a
		// stopping daemon was still starting stays created, and the next daemon replaces it.
		for deadline := time.Now().Add(time.Minute); len(testenv.RunningContainers(t, cfg.DataDir)) < cfg.Slots; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d slot containers running after a minute", len(testenv.RunningContainers(t, cfg.DataDir)), cfg.Slots)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := len(testenv.Containers(t, cfg.DataDir)); n != cfg.Slots {
			t.Fatalf("after start %d: %d containers, want one per slot (%d)", i+1, n, cfg.Slots)
		}
	}
}

// BenchmarkRESTPrint1 measures print(1) end to end through the REST API and the warm container.
func BenchmarkRESTPrint1(b *testing.B) {
	benchREST(b, `{"code": "print(1)"}`, `"outcome":"ok"`)
}

// BenchmarkRESTPandas measures a pandas snippet end to end (the import dominates).
func BenchmarkRESTPandas(b *testing.B) {
	benchREST(b, `{"code": "import pandas as pd; print(pd.DataFrame({'a': [1, 2]}).a.sum())"}`, `"stdout":"3\n"`)
}

func benchREST(b *testing.B, body, want string) {
	url := daemon(b, testConfig(b))
	// Until the fork server is ready, runs start cold: wait for it.
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := http.Post(url+"/v1/executions", "application/json", strings.NewReader(`{"code": "print(1)"}`))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(out, []byte(`"start":"fork"`)) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("runs do not start from the fork server: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for b.Loop() {
		resp, err := http.Post(url+"/v1/executions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(out, []byte(want)) {
			b.Fatalf("%s", out)
		}
	}
}

// A daemon told to stop lets running executions finish for a while, then interrupts them: the
// client still gets a result, not a cut connection.
func TestShutdownAnswersInterruptedRuns(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Serve(ctx, cfg, testVersion, testenv.Logger(), io.Discard, func(a string) { addr <- a })
	}()
	url := "http://" + <-addr
	answered := make(chan []byte, 1)
	go func() {
		resp, err := http.Post(url+"/v1/executions", "application/json",
			strings.NewReader(`{"code": "print('started', flush=True)\nimport time; time.sleep(60)"}`))
		if err != nil {
			answered <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- b
	}()
	time.Sleep(time.Second)
	cancel()
	select {
	case body := <-answered:
		var res sandbox.Result
		if err := json.Unmarshal(body, &res); err != nil || res.Outcome != sandbox.OutcomeSandboxError ||
			!strings.HasPrefix(res.Reason, "interrupted") || res.Stdout != "started\n" {
			t.Fatalf("answer %s (%v)", body, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer after the daemon was told to stop")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// H39: a daemon with a token refuses a data directory other users can read (the database
// holds every run's code and output), saying how to fix it; without a token it starts.
func TestTokenDaemonRefusesAReadableDataDir(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir, cfg.Token = t.TempDir(), "a-long-enough-test-token-0123456789"
	for _, d := range []string{filepath.Dir(cfg.DataDir), cfg.DataDir} { // t.TempDir's own is private
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := app.Open(context.Background(), cfg, testenv.Logger(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+cfg.DataDir) || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("app.Open with a token on a 0755 data directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "sandpit.db")); err == nil {
		t.Fatal("the database was created in the readable data directory")
	}
	found := false
	for _, c := range app.Doctor(context.Background(), cfg, app.ConfigSource{Name: "test"}, "http://127.0.0.1:1") {
		if c.Name == "data directory" {
			found = true
			if c.OK || !c.Required || !strings.Contains(c.Fix, "chmod 700") {
				t.Fatalf("doctor: %+v", c)
			}
		}
	}
	if !found {
		t.Fatal("doctor checked no data directory")
	}
}
