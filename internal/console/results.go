package console

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A run's notebook results (docs/notebook.md) on its execution page: each display's, and the
// last expression's, richest form the console can show safely. HTML is served by its own
// route into a sandboxed frame (no scripts, no same origin: an opaque origin that reaches
// neither the console nor its cookies); images by their own route into <img>; the rest as
// text.

// resultView is one result as the execution page shows it.
type resultView struct {
	N       int    // 1-based
	Main    bool   // the value of the last expression
	Count   int    // a session's execution count, on the main result
	Text    string // text/plain (or the markdown or JSON when that is all there is)
	HTMLURL string // the frame's source, when the result has text/html
	ImgURL  string // the image's source, when it has image/png, image/jpeg or image/svg+xml
	Kinds   string // its MIME types, for the caption
	Chart   string // what its chart as data is (`line chart "Sales" (2 series)`), when it has one
	Note    string
}

// resultKinds maps a result route's last part to the MIME type it serves.
var resultKinds = map[string]string{"html": "text/html", "png": "image/png", "jpeg": "image/jpeg", "svg": "image/svg+xml"}

// ResultURL is the console's URL of result n (1-based) of execution id in kind ("html",
// "png", "jpeg" or "svg").
func ResultURL(id string, n int, kind string) string {
	return fmt.Sprintf("/ui/executions/%s/results/%d/%s", url.PathEscape(id), n, kind)
}

func resultViews(id string, results []sandbox.Display) []resultView {
	var out []resultView
	for i, d := range results {
		v := resultView{N: i + 1, Main: d.IsMainResult, Count: d.ExecutionCount, Text: d.Text(), Note: d.Note,
			Chart: apitype.ChartSummary(d.Data[apitype.ChartMIME])}
		for mt := range d.Data {
			if v.Kinds != "" {
				v.Kinds += ", "
			}
			v.Kinds += mt
		}
		if _, ok := d.Data["text/html"]; ok {
			v.HTMLURL = ResultURL(id, i+1, "html")
		}
		for _, kind := range []string{"png", "jpeg", "svg"} {
			if _, ok := d.Data[resultKinds[kind]]; ok && v.ImgURL == "" {
				v.ImgURL = ResultURL(id, i+1, kind)
			}
		}
		if v.Text == "" {
			for _, mt := range []string{"text/markdown", "application/json", "text/latex"} {
				if raw, ok := d.Data[mt]; ok {
					v.Text = string(raw)
					if s := ""; json.Unmarshal(raw, &s) == nil {
						v.Text = s
					}
					break
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// executionResult serves one result's HTML or image from the ledger: HTML under a CSP that
// sandboxes it (no scripts, an opaque origin) and lets only the console frame it; images as
// their bytes.
func (c *Console) executionResult(w http.ResponseWriter, r *http.Request, _ login) {
	e, ok := c.execution(w, r)
	if !ok {
		return
	}
	id := e.ID
	n, err := strconv.Atoi(r.PathValue("n"))
	mt, kind := resultKinds[r.PathValue("kind")], r.PathValue("kind")
	if err != nil || n < 1 || n > len(e.Results) || mt == "" {
		c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Execution %s has no result %s as %s.", id, r.PathValue("n"), kind))
		return
	}
	raw, ok := e.Results[n-1].Data[mt]
	var text string
	if !ok || json.Unmarshal(raw, &text) != nil {
		c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Result %d of execution %s has no %s.", n, id, mt))
		return
	}
	body := []byte(text)
	if kind == "png" || kind == "jpeg" {
		if body, err = base64.StdEncoding.DecodeString(text); err != nil {
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Result %d of execution %s holds no valid base64 %s.", n, id, mt))
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", mt)
	if kind == "svg" {
		h.Set("Content-Type", mt+"; charset=utf-8")
	}
	if kind == "html" {
		h.Set("Content-Type", "text/html; charset=utf-8")
	}
	// The program's HTML (or SVG) is untrusted: a sandbox with no allowances (no scripts, no
	// forms, an opaque origin), inline styles and data: images only, framed by the console alone.
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("Cache-Control", "private, max-age=3600")
	w.Write(body)
}
