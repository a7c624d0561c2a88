package mcpserver

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// A run's displays and value reach a chat client as it shows them: text as text, an image as
// image content (once: not again when an output file holds it), HTML as an embedded resource,
// a figure's chart as data named in the caption and embedded as JSON.
func TestResultContents(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nchart")
	figure := []byte("\x89PNG\r\n\x1a\nfigure")
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	chart := `{"type": "pie", "title": "Vote", "elements": [{"label": "yes", "angle": 270.0, "radius": 1.0}]}`
	sum := sha256.Sum256(figure)
	res := apitype.Result{ID: "ex_1", Files: []apitype.File{{Name: "figure-1.png", SHA256: hex.EncodeToString(sum[:])}},
		Results: []apitype.Display{
			{Data: map[string]json.RawMessage{"text/plain": str("<Figure>"), "image/png": str(base64.StdEncoding.EncodeToString(png))}},
			{Data: map[string]json.RawMessage{"text/plain": str("<Figure 2>"), "image/png": str(base64.StdEncoding.EncodeToString(figure)),
				apitype.ChartMIME: json.RawMessage(chart)}},
			{IsMainResult: true, Data: map[string]json.RawMessage{"text/plain": str("   a\n0  1"), "text/html": str("<table></table>")}},
		}}
	got := resultContents(res)
	var kinds []string
	for _, c := range got {
		switch c := c.(type) {
		case *mcp.TextContent:
			kinds = append(kinds, "text:"+strings.SplitN(c.Text, "\n", 2)[0])
		case *mcp.ImageContent:
			if string(c.Data) != string(png) || c.MIMEType != "image/png" {
				t.Errorf("image content %q %s", c.Data, c.MIMEType)
			}
			kinds = append(kinds, "image")
		case *mcp.EmbeddedResource:
			if c.Resource.MIMEType == "application/json" {
				if c.Resource.Text != chart || c.Resource.URI != "sandpit://executions/ex_1/results/2.chart.json" {
					t.Errorf("the chart's resource %+v", c.Resource)
				}
				kinds = append(kinds, "chart")
				continue
			}
			if c.Resource.MIMEType != "text/html" || c.Resource.Text != "<table></table>" || c.Resource.URI != "sandpit://executions/ex_1/results/3.html" {
				t.Errorf("embedded resource %+v", c.Resource)
			}
			kinds = append(kinds, "html")
		}
	}
	want := "text:display 1:|image|text:display 2: (image/png below as an output file) (pie chart \"Vote\" (1 slice))|chart|text:value of the last expression:|html"
	if strings.Join(kinds, "|") != want {
		t.Fatalf("contents %q, want %q", strings.Join(kinds, "|"), want)
	}
}
