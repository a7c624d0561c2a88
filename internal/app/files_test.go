package app_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// fileAnswer is a result with its files as answered (content_base64 with inline_files).
type fileAnswer struct {
	sandbox.Result
	Files []struct {
		sandbox.File
		ContentBase64 string `json:"content_base64"`
	} `json:"files"`
}

func getFile(t *testing.T, url, id, name string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url + "/v1/executions/" + id + "/files/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// Input files reach the program byte-exact, its output files come back byte-exact over REST
// (listed, inline, streamed, fetched), a chart shown with plt.show() comes back as a PNG, and
// the files are kept in the data directory: all through the real engine.
func TestFilesThroughTheEngine(t *testing.T) {
	cfg := testConfig(t)
	cfg.Slots = 1
	url := daemon(t, cfg)

	text := "a,b\n1,2\n测试 😀\n"
	raw := make([]byte, 256)
	for i := range raw {
		raw[i] = byte(i)
	}
	in := func(name, content, encoding string) map[string]string {
		return map[string]string{"name": name, "content": content, "encoding": encoding}
	}
	code := `import hashlib, os
for name in ["data.csv", "in/raw.bin"]:
    b = open(name, "rb").read()
    print(name, len(b), hashlib.sha256(b).hexdigest())
    os.makedirs("out/in", exist_ok=True)
    open("out/" + name, "wb").write(b)
`
	body, _ := json.Marshal(map[string]any{"code": code, "inline_files": true, "charts": false,
		"files": []map[string]string{in("data.csv", text, "utf-8"), in("in/raw.bin", base64.StdEncoding.EncodeToString(raw), "base64")}})
	resp, b := post(t, url, string(body))
	var res fileAnswer
	if err := json.Unmarshal(b, &res); err != nil || resp.StatusCode != 200 || res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	if want := "data.csv " + itoa(len(text)) + " " + sum([]byte(text)) + "\nin/raw.bin 256 " + sum(raw) + "\n"; res.Stdout != want {
		t.Fatalf("the program read\n%s\nwant\n%s", res.Stdout, want)
	}
	want := map[string][]byte{"out/data.csv": []byte(text), "out/in/raw.bin": raw}
	if len(res.Files) != 2 {
		t.Fatalf("files %+v, want the two copies (not the unchanged inputs, not main.py); skipped %+v", res.Files, res.FilesSkipped)
	}
	for _, f := range res.Files {
		inline, _ := base64.StdEncoding.DecodeString(f.ContentBase64)
		if !bytes.Equal(inline, want[f.Name]) || f.SHA256 != sum(want[f.Name]) || f.SizeBytes != int64(len(want[f.Name])) {
			t.Errorf("answer's %s: %+v, want %d bytes byte-exact", f.Name, f.File, len(want[f.Name]))
		}
		resp, got := getFile(t, url, res.ID, f.Name)
		if resp.StatusCode != 200 || !bytes.Equal(got, want[f.Name]) || resp.Header.Get("Content-Disposition") == "" ||
			resp.Header.Get("Content-Security-Policy") != "sandbox; default-src 'none'" {
			t.Errorf("GET %s: %d %v %q", f.Name, resp.StatusCode, resp.Header, got)
		}
	}
	// Kept in the data directory, one file per output.
	if entries, err := os.ReadDir(filepath.Join(cfg.DataDir, store.FilesDir, res.ID)); err != nil || len(entries) != 2 {
		t.Errorf("files/%s: %d entries, %v", res.ID, len(entries), err)
	}

	t.Run("a chart shown comes back as a PNG, in the stream too", func(t *testing.T) {
		chart := `import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2])
plt.show()`
		body, _ := json.Marshal(map[string]any{"code": chart})
		_, stream := post(t, url, string(body), "Accept", "application/x-ndjson")
		var types []string
		var res sandbox.Result
		for line := range bytes.Lines(stream) {
			var l struct {
				Type   string          `json:"type"`
				File   *sandbox.File   `json:"file"`
				Result *sandbox.Result `json:"result"`
			}
			if err := json.Unmarshal(line, &l); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			types = append(types, l.Type)
			if l.Result != nil {
				res = *l.Result
			}
		}
		if len(types) < 2 || types[len(types)-2] != "file" || types[len(types)-1] != "result" || res.Outcome != sandbox.OutcomeOK {
			t.Fatalf("lines %v, result %+v: want a file line before the result", types, res)
		}
		if len(res.Files) != 1 || res.Files[0].Name != "figure-1.png" || res.Files[0].MediaType != "image/png" {
			t.Fatalf("files %+v, want figure-1.png", res.Files)
		}
		resp, png := getFile(t, url, res.ID, "figure-1.png")
		if resp.StatusCode != 200 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || int64(len(png)) != res.Files[0].SizeBytes ||
			resp.Header.Get("Content-Type") != "image/png" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "inline") {
			t.Fatalf("GET figure-1.png: %d %v, %d bytes", resp.StatusCode, resp.Header, len(png))
		}
		// The IHDR chunk: a picture of matplotlib's default size (640×480 at 100 dpi).
		if w, h := binary.BigEndian.Uint32(png[16:20]), binary.BigEndian.Uint32(png[20:24]); w < 100 || h < 100 {
			t.Errorf("the PNG is %d×%d", w, h)
		}
	})

	t.Run("bad files are refused before anything runs", func(t *testing.T) {
		for _, files := range []string{`[{"name": "../x", "content": "a"}]`, `[{"name": "a", "content": "%%", "encoding": "base64"}]`} {
			resp, b := post(t, url, `{"code": "open('/tmp/ran', 'w')", "files": `+files+`}`)
			if resp.StatusCode != 400 || !bytes.Contains(b, []byte(`"field":"files[0].`)) {
				t.Errorf("%s: %d %s", files, resp.StatusCode, b)
			}
		}
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
