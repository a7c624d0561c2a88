package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
)

func fileOf(name, mediaType string, content []byte) apitype.File {
	sum := sha256.Sum256(content)
	return apitype.File{Name: name, SizeBytes: int64(len(content)), MediaType: mediaType, SHA256: hex.EncodeToString(sum[:])}
}

// answerWithFiles is a run's answer in the REST shape, with files; those in inline carry
// content_base64.
func answerWithFiles(files []apitype.File, inline map[string][]byte) map[string]any {
	res := httpapi.ResultOf(result(""))
	res.Files = files
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	entries := m["files"].([]any)
	for i, f := range files {
		if c, ok := inline[f.Name]; ok {
			entries[i].(map[string]any)["content_base64"] = base64.StdEncoding.EncodeToString(c)
		}
	}
	return m
}

func TestInputFileOf(t *testing.T) {
	text := InputFileOf("a.csv", []byte("a,b\n1,二\n"))
	if text != (apitype.InputFile{Name: "a.csv", Content: "a,b\n1,二\n", Encoding: "utf-8"}) {
		t.Errorf("text file = %+v", text)
	}
	bin := []byte{0x89, 'P', 'N', 'G', 0, 0xff}
	got := InputFileOf("img.png", bin)
	if got.Encoding != "base64" || got.Content != base64.StdEncoding.EncodeToString(bin) {
		t.Errorf("binary file = %+v", got)
	}
}

// TestExecuteSendsFilesAndReadsInline: files, charts and inline_files go in the REST shape;
// the answer's files come back listed, the inline ones with their bytes.
func TestExecuteSendsFilesAndReadsInline(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n fake")
	csv := []byte("x,y\n1,2\n")
	files := []apitype.File{fileOf("figure-1.png", "image/png", png), fileOf("out/data.csv", "text/csv; charset=utf-8", csv),
		fileOf("big.bin", "application/octet-stream", []byte("not inline"))}
	var body map[string]any
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answerWithFiles(files, map[string][]byte{"figure-1.png": png, "out/data.csv": csv}))
	})
	bin := []byte{0, 1, 2, 0xfe, 0xff}
	a, err := c.ExecuteAnswer(context.Background(), apitype.ExecuteRequest{Code: "x", RunFiles: apitype.RunFiles{
		Files:  []apitype.InputFile{InputFileOf("in.txt", []byte("héllo")), InputFileOf("d/b.bin", bin)},
		Charts: new(bool), InlineFiles: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `[map[content:héllo encoding:utf-8 name:in.txt] map[content:AAEC/v8= encoding:base64 name:d/b.bin]]`
	if got := fmt.Sprint(body["files"]); got != want {
		t.Errorf("files sent = %s, want %s", got, want)
	}
	if body["charts"] != false || body["inline_files"] != true {
		t.Errorf("charts %v, inline_files %v; want false and true", body["charts"], body["inline_files"])
	}
	if len(a.Files) != 3 || a.Files[1] != files[1] {
		t.Errorf("files = %+v", a.Files)
	}
	if len(a.Inline) != 2 || !bytes.Equal(a.Inline["figure-1.png"], png) || !bytes.Equal(a.Inline["out/data.csv"], csv) {
		t.Errorf("inline = %q", a.Inline)
	}
}

// TestExecuteOmitsFilesWhenNone: a request without files sends none of the new fields, so an
// older daemon (strict about fields) takes it.
func TestExecuteOmitsFilesWhenNone(t *testing.T) {
	var raw string
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		raw = string(b)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(result("hi"))
	})
	if _, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"files", "charts", "inline_files"} {
		if strings.Contains(raw, `"`+f+`"`) {
			t.Errorf("request %s sends %s", raw, f)
		}
	}
}

func TestStreamFileEvents(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n stream")
	f := fileOf("figure-1.png", "image/png", png)
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fl, _ := json.Marshal(map[string]any{"type": "file", "file": f})
		res, _ := json.Marshal(map[string]any{"type": "result", "result": answerWithFiles([]apitype.File{f}, map[string][]byte{f.Name: png})})
		fmt.Fprintf(w, "%s\n%s\n%s\n", `{"type":"stdout","data":"a"}`, fl, res)
	})
	var events []apitype.Event
	a, err := c.ExecuteAnswer(context.Background(), apitype.ExecuteRequest{Code: "x"}, func(e apitype.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[1].Stream != apitype.StreamFile || events[1].File == nil || *events[1].File != f {
		t.Errorf("events = %+v", events)
	}
	if !bytes.Equal(a.Inline[f.Name], png) || len(a.Files) != 1 {
		t.Errorf("answer = %+v", a)
	}
}

// TestRunCodeSendsFiles: a saved-code run sends its files beside input, timeout and version.
func TestRunCodeSendsFiles(t *testing.T) {
	var body map[string]any
	var path string
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(result(""))
	})
	_, err := c.RunCode(context.Background(), "bob", "tool", apitype.CodeRun{Input: json.RawMessage(`[1]`), Version: 2,
		RunFiles: apitype.RunFiles{Files: []apitype.InputFile{InputFileOf("a.txt", []byte("A"))}, InlineFiles: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if path != "/v1/agents/bob/code/tool/run" || fmt.Sprint(body["files"]) != "[map[content:A encoding:utf-8 name:a.txt]]" ||
		body["version"] != 2.0 || fmt.Sprint(body["input"]) != "[1]" || body["inline_files"] != true {
		t.Errorf("POST %s %v", path, body)
	}
}

// TestInlineBytesMustMatch: inline bytes that are not those the entry lists are an error, not
// a file.
func TestInlineBytesMustMatch(t *testing.T) {
	f := fileOf("a.txt", "text/plain", []byte("right"))
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answerWithFiles([]apitype.File{f}, map[string][]byte{"a.txt": []byte("wrong")}))
	})
	_, err := c.ExecuteAnswer(context.Background(), apitype.ExecuteRequest{Code: "x", RunFiles: apitype.RunFiles{InlineFiles: true}}, nil)
	if err == nil || !strings.Contains(err.Error(), `"a.txt"`) {
		t.Errorf("err = %v, want one naming a.txt", err)
	}
}

// TestReadFile: the path escapes each part of the name; the bytes are checked against the
// entry; a 404 and a 410 are APIErrors.
func TestReadFile(t *testing.T) {
	const id = "ex_bbbbbbbbbbbbbbbbbbbbbbbbbb"
	content := []byte("x,y\n")
	good := fileOf("my dir/a%b#?.csv", "text/csv", content)
	var rawPath string
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		rawPath = r.URL.EscapedPath()
		switch r.URL.Path {
		case "/v1/executions/" + id + "/files/my dir/a%b#?.csv":
			w.Header().Set("Content-Type", "text/csv")
			_, _ = w.Write(content)
		case "/v1/executions/" + id + "/files/liar.csv":
			_, _ = w.Write([]byte("other bytes"))
		case "/v1/executions/" + id + "/files/gone.csv":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			_, _ = io.WriteString(w, `{"error": {"code": "gone", "message": "evicted to keep files_max_bytes"}}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error": {"code": "not_found", "message": "no such file"}}`)
		}
	})
	got, err := c.ReadFile(context.Background(), id, good, 0)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if want := "/v1/executions/" + id + "/files/my%20dir/a%25b%23%3F.csv"; rawPath != want {
		t.Errorf("path %s, want %s", rawPath, want)
	}
	if _, err := c.ReadFile(context.Background(), id, fileOf("liar.csv", "text/csv", content), 0); err == nil {
		t.Error("bytes unlike the entry's were accepted")
	}
	if _, err := c.ReadFile(context.Background(), id, good, 2); err == nil {
		t.Error("a file over max was read")
	}
	for name, status := range map[string]int{"gone.csv": 410, "none.csv": 404} {
		_, err := c.ReadFile(context.Background(), id, fileOf(name, "text/csv", content), 0)
		var api *APIError
		if !errors.As(err, &api) || api.Status != status {
			t.Errorf("%s: err %v, want an APIError of %d", name, err, status)
		}
	}
}
