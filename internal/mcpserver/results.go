package mcpserver

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// resultContents are a run's notebook results (docs/notebook.md) as tool result content, so
// that a chat client shows the table and the chart: each display's, and the last
// expression's, text/plain as text content under a caption saying which it is; its
// image/png or image/jpeg (at most MaxImageBytes) as image content, unless an output file
// listed in res holds the same bytes (a figure also saved as figure-N.png: the file's content
// shows it); its text/html (at most MaxEmbeddedBytes) as an embedded resource of MIME type
// text/html, named sandpit://executions/{id}/results/{n}.html (n counts from 1; the URI names
// the display, resources/read does not serve it); a figure's chart as data (e2b/chart, at most
// MaxEmbeddedBytes) named in the caption (`line chart "Sales" (2 series)`) and embedded as
// application/json, sandpit://executions/{id}/results/{n}.chart.json. Their bytes together stay within
// MaxResultFileBytes; what is left out is said in the caption.
func resultContents(res apitype.Result) []mcp.Content {
	files := map[string]bool{}
	for _, f := range res.Files {
		files[f.SHA256] = true
	}
	var out []mcp.Content
	budget := MaxResultFileBytes
	for i, d := range res.Results {
		caption := fmt.Sprintf("display %d", i+1)
		if d.IsMainResult {
			caption = "value of the last expression"
			if d.ExecutionCount > 0 {
				caption = fmt.Sprintf("Out[%d] (value of the last expression)", d.ExecutionCount)
			}
		}
		var text string
		_ = json.Unmarshal(d.Data["text/plain"], &text)
		var rich []mcp.Content
		var left []string
		for _, mt := range []string{"image/png", "image/jpeg"} {
			var b64 string
			if json.Unmarshal(d.Data[mt], &b64) != nil {
				continue
			}
			img, err := base64.StdEncoding.DecodeString(b64)
			sum := sha256.Sum256(img)
			switch {
			case err != nil:
			case files[hex.EncodeToString(sum[:])]:
				left = append(left, mt+" below as an output file")
			case len(img) > MaxImageBytes || len(img) > budget:
				left = append(left, fmt.Sprintf("%s of %d bytes left out (over the cap on images)", mt, len(img)))
			default:
				rich = append(rich, &mcp.ImageContent{Data: img, MIMEType: mt})
				budget -= len(img)
			}
		}
		var html string
		if json.Unmarshal(d.Data["text/html"], &html) == nil && html != "" {
			if len(html) > MaxEmbeddedBytes || len(html) > budget {
				left = append(left, fmt.Sprintf("text/html of %d bytes left out (over the cap on embedded resources)", len(html)))
			} else {
				rich = append(rich, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
					URI: fmt.Sprintf("%s%s/results/%d.html", fileURIPrefix, res.ID, i+1), MIMEType: "text/html", Text: html}})
				budget -= len(html)
			}
		}
		if chart := d.Data[apitype.ChartMIME]; len(chart) > 0 {
			left = append(left, d.ChartSummary())
			if len(chart) > MaxEmbeddedBytes || len(chart) > budget {
				left = append(left, fmt.Sprintf("its chart's data of %d bytes left out (over the cap on embedded resources)", len(chart)))
			} else {
				rich = append(rich, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
					URI: fmt.Sprintf("%s%s/results/%d.chart.json", fileURIPrefix, res.ID, i+1), MIMEType: "application/json", Text: string(chart)}})
				budget -= len(chart)
			}
		}
		if d.Note != "" {
			left = append(left, d.Note)
		}
		caption += ":"
		for _, l := range left {
			caption += " (" + l + ")"
		}
		out = append(out, &mcp.TextContent{Text: caption + "\n" + text})
		out = append(out, rich...)
	}
	return out
}
