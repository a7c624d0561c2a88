package mcpserver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/mcpserver"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// filesRuntime answers every run with output files: the input files it got, back under out/,
// and the files of outputs (name → media type, bytes), emitted with their bytes as a runtime
// does.
type filesRuntime struct {
	outputs map[string]output
	specs   chan sandbox.Spec
}

type output struct {
	mediaType string
	content   []byte
}

func (filesRuntime) Ready(context.Context) error { return nil }
func (r filesRuntime) Run(_ context.Context, _ int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	if r.specs != nil {
		r.specs <- spec
	}
	res := sandbox.Result{Outcome: sandbox.OutcomeOK, Stdout: "drew\n", Output: json.RawMessage("null"), StartedAt: time.Now().UTC()}
	add := func(name, mediaType string, content []byte) {
		sum := sha256.Sum256(content)
		f := sandbox.File{Name: name, SizeBytes: int64(len(content)), MediaType: mediaType, SHA256: hex.EncodeToString(sum[:])}
		emit(sandbox.Event{Stream: sandbox.StreamFile, File: &f, Content: content})
		res.Files = append(res.Files, f)
	}
	for _, in := range spec.Files {
		add("out/"+in.Name, "application/octet-stream", in.Content)
	}
	for _, name := range slices.Sorted(maps.Keys(r.outputs)) {
		add(name, r.outputs[name].mediaType, r.outputs[name].content)
	}
	return res, nil
}

// pngBytes is a 1×1 PNG.
var pngBytes, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

// TestRunCodeFiles: run_code hands its files to the run (as the REST API takes them), and
// returns a PNG as image content whose data is the PNG, a CSV as an embedded text resource,
// a binary as an embedded blob, and a file over 1 MiB as a resource link; resources/read of
// each URI answers its bytes, for this agent only.
func TestRunCodeFiles(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), (mcpserver.MaxImageBytes/16)+1)
	medium := bytes.Repeat([]byte("x"), mcpserver.MaxEmbeddedBytes+1)
	rt := filesRuntime{specs: make(chan sandbox.Spec, 1), outputs: map[string]output{
		"figure-1.png":     {"image/png", pngBytes},
		"tables/sales.csv": {"text/csv; charset=utf-8", []byte("région,total\nnord,3\n")},
		"model.bin":        {"application/octet-stream", []byte{0, 1, 2, 0xff}},
		"big log.txt":      {"text/plain; charset=utf-8", big},
		"medium.txt":       {"text/plain; charset=utf-8", medium},
	}}
	url, _ := newAPI(t, rt, engine.DefaultConfig())
	cs := connect(t, newServer(t, url, "alice"))

	res, text := callTool(t, cs, "run_code", map[string]any{"code": "draw()", "charts": false, "files": []map[string]any{
		{"name": "in.csv", "content": "a,b\n"},
		{"name": "raw.bin", "content": base64.StdEncoding.EncodeToString([]byte{0xfe, 0}), "encoding": "base64"},
	}})
	if res.IsError {
		t.Fatalf("run_code failed: %s", text)
	}
	spec := <-rt.specs
	if len(spec.Files) != 2 || spec.Files[0].Name != "in.csv" || string(spec.Files[0].Content) != "a,b\n" ||
		!bytes.Equal(spec.Files[1].Content, []byte{0xfe, 0}) || spec.Charts {
		t.Errorf("the run got files %+v, charts %v", spec.Files, spec.Charts)
	}
	var id string
	if err := json.Unmarshal(mustJSON(t, res.StructuredContent), &struct {
		ID *string `json:"id"`
	}{&id}); err != nil || !sandbox.ValidID(id) {
		t.Fatalf("structured content has no execution id: %v", res.StructuredContent)
	}
	byURI := map[string]mcp.Content{}
	var images []*mcp.ImageContent
	var captions []string
	for _, c := range res.Content[1:] {
		switch c := c.(type) {
		case *mcp.TextContent:
			captions = append(captions, c.Text)
		case *mcp.ImageContent:
			images = append(images, c)
		case *mcp.EmbeddedResource:
			byURI[c.Resource.URI] = c
		case *mcp.ResourceLink:
			byURI[c.URI] = c
		default:
			t.Errorf("unexpected content %T", c)
		}
	}
	if len(images) != 1 || images[0].MIMEType != "image/png" || !bytes.Equal(images[0].Data, pngBytes) {
		t.Errorf("images = %+v", images)
	}
	// Image content has no name: a caption just before it names the file.
	if len(captions) != 1 || !strings.HasPrefix(captions[0], "figure-1.png (image/png, ") {
		t.Errorf("captions = %q, want one naming figure-1.png", captions)
	}
	// On the wire the image is base64 that decodes to the PNG.
	wire := mustJSON(t, images[0])
	var img struct{ Type, Data, MimeType string }
	if err := json.Unmarshal(wire, &img); err != nil || img.Type != "image" || img.MimeType != "image/png" {
		t.Fatalf("image on the wire: %s", wire)
	}
	if b, err := base64.StdEncoding.DecodeString(img.Data); err != nil || !bytes.Equal(b, pngBytes) {
		t.Errorf("the image's data decodes to %q, %v", b, err)
	}

	uri := func(name string) string { return mcpserver.FileURI(id, name) }
	csv, ok := byURI[uri("tables/sales.csv")].(*mcp.EmbeddedResource)
	if !ok || csv.Resource.Text != "région,total\nnord,3\n" || csv.Resource.MIMEType != "text/csv; charset=utf-8" || csv.Resource.Blob != nil {
		t.Errorf("the CSV is %#v", byURI[uri("tables/sales.csv")])
	}
	bin, ok := byURI[uri("model.bin")].(*mcp.EmbeddedResource)
	if !ok || !bytes.Equal(bin.Resource.Blob, []byte{0, 1, 2, 0xff}) || bin.Resource.Text != "" {
		t.Errorf("the binary is %#v", byURI[uri("model.bin")])
	}
	if _, ok := byURI[uri("out/raw.bin")].(*mcp.EmbeddedResource); !ok {
		t.Errorf("the input file's copy is %#v", byURI[uri("out/raw.bin")])
	}
	link, ok := byURI[uri("big log.txt")].(*mcp.ResourceLink)
	if !ok || link.Size == nil || *link.Size != int64(len(big)) || link.MIMEType != "text/plain; charset=utf-8" {
		t.Fatalf("the large file is %#v", byURI[uri("big log.txt")])
	}
	if _, ok := byURI[uri("medium.txt")].(*mcp.ResourceLink); !ok {
		t.Errorf("a text over %d bytes is %#v, want a link", mcpserver.MaxEmbeddedBytes, byURI[uri("medium.txt")])
	}
	if want := "sandpit://executions/" + id + "/files/big%20log.txt"; link.URI != want {
		t.Errorf("link URI %s, want %s", link.URI, want)
	}
	if !strings.Contains(text, "figure-1.png (image/png") || !strings.Contains(text, link.URI) {
		t.Errorf("the text does not list the files: %s", text)
	}

	// resources/read answers the bytes of each, the large one included.
	for name, want := range map[string]string{"big log.txt": string(big), "tables/sales.csv": "région,total\nnord,3\n"} {
		rr, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri(name)})
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != want {
			t.Errorf("reading %s: %v %+v", name, err, rr)
		}
	}
	rr, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri("figure-1.png")})
	if err != nil || len(rr.Contents) != 1 || !bytes.Equal(rr.Contents[0].Blob, pngBytes) || rr.Contents[0].MIMEType != "image/png" {
		t.Errorf("reading the PNG: %v %+v", err, rr)
	}
	templates, err := cs.ListResourceTemplates(t.Context(), nil)
	if err != nil || len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != "sandpit://executions/{id}/files/{+name}" {
		t.Errorf("templates: %v %+v", err, templates)
	}

	// Another agent's server does not find alice's files; nor does anyone a file not listed,
	// or a name that is no file name.
	other := connect(t, newServer(t, url, "bob"))
	for _, c := range []struct {
		cs  *mcp.ClientSession
		uri string
	}{{other, uri("figure-1.png")}, {cs, uri("nope.png")}, {cs, "sandpit://executions/" + id + "/files/..%2Fx"},
		{cs, "sandpit://executions/" + id + "/files/a/../figure-1.png"}, {cs, "sandpit://executions/ex_nope/files/figure-1.png"}} {
		if rr, err := c.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: c.uri}); err == nil {
			t.Errorf("reading %s answered %+v", c.uri, rr)
		}
	}
}

// TestRunSavedCodeFiles: run_saved_code takes files too and answers images the same way.
func TestRunSavedCodeFiles(t *testing.T) {
	rt := filesRuntime{specs: make(chan sandbox.Spec, 1), outputs: map[string]output{"figure-1.png": {"image/png", pngBytes}}}
	url, _ := newAPI(t, rt, engine.DefaultConfig())
	cs := connect(t, newServer(t, url, "alice"))
	if res, text := callTool(t, cs, "save_code", map[string]any{"name": "plot", "code": "draw()"}); res.IsError {
		t.Fatal(text)
	}
	res, text := callTool(t, cs, "run_saved_code", map[string]any{"name": "plot", "files": []map[string]any{{"name": "d.txt", "content": "x"}}})
	if res.IsError {
		t.Fatal(text)
	}
	if spec := <-rt.specs; len(spec.Files) != 1 || string(spec.Files[0].Content) != "x" {
		t.Errorf("the run got files %+v", spec.Files)
	}
	n := 0
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok && bytes.Equal(img.Data, pngBytes) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d PNG images in %+v", n, res.Content)
	}
}

// TestRunCodeBadFile: a bad file name is a tool error in the REST API's words.
func TestRunCodeBadFile(t *testing.T) {
	url, _ := newAPI(t, filesRuntime{}, engine.DefaultConfig())
	cs := connect(t, newServer(t, url, "alice"))
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "1",
		"files": []map[string]any{{"name": "../x", "content": "a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if !res.IsError || !strings.Contains(text, "files[0].name") || !strings.Contains(text, `"../x"`) {
		t.Errorf("a bad name answered %v %q", res.IsError, text)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestResultFileBudget: images past a result's share (MaxResultFileBytes) are links.
func TestResultFileBudget(t *testing.T) {
	img := append(slices.Clone(pngBytes), make([]byte, mcpserver.MaxImageBytes-len(pngBytes))...)
	outputs := map[string]output{}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		outputs[n+".png"] = output{"image/png", img}
	}
	url, _ := newAPI(t, filesRuntime{outputs: outputs}, engine.DefaultConfig())
	res, text := callTool(t, connect(t, newServer(t, url, "alice")), "run_code", map[string]any{"code": "draw()"})
	if res.IsError {
		t.Fatal(text)
	}
	var kinds []string
	for _, c := range res.Content[1:] {
		kinds = append(kinds, fmt.Sprintf("%T", c))
	}
	img4 := []string{"*mcp.TextContent", "*mcp.ImageContent"}
	want := slices.Concat(img4, img4, img4, img4, []string{"*mcp.ResourceLink"})
	if !slices.Equal(kinds, want) {
		t.Errorf("content %v, want %v", kinds, want)
	}
}

// TestRunCodeNetworkAllow: run_code's network_allow is the request's: one that would widen the
// server's list (empty here) is refused with the REST API's message, and nothing runs.
func TestRunCodeNetworkAllow(t *testing.T) {
	rt := filesRuntime{specs: make(chan sandbox.Spec, 1)}
	url, _ := newAPI(t, rt, engine.DefaultConfig())
	cs := connect(t, newServer(t, url, "alice"))
	res, text := callTool(t, cs, "run_code", map[string]any{"code": "1", "network_allow": []string{"api.example.com"}})
	if !res.IsError || !strings.Contains(text, "network_allow") || !strings.Contains(text, "api.example.com") {
		t.Fatalf("a widening network_allow: error %v, %s", res.IsError, text)
	}
	select {
	case spec := <-rt.specs:
		t.Fatalf("a refused request ran: %+v", spec)
	default:
	}
}
