package apitype

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// ChartMIME is the MIME type of a display's chart as data: a matplotlib figure shown is
// described, beside its image/png, in the shape E2B's code interpreter gives its results'
// "chart" (docs/notebook.md): {"type": "line" | "scatter" | "bar" | "pie" |
// "box_and_whisker" | "superchart" | "unknown", "title": string | null, "elements": [...],
// ...}.
const ChartMIME = "e2b/chart"

// ChartSummary says in a few words what a display's chart (its ChartMIME value) is: its type,
// its title and how many elements it has, as in `line chart "Sales" (2 series)`. It is empty
// when raw is not a chart.
func ChartSummary(raw json.RawMessage) string {
	var c struct {
		Type     string            `json:"type"`
		Title    *string           `json:"title"`
		Elements []json.RawMessage `json:"elements"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &c) != nil || c.Type == "" {
		return ""
	}
	kind := map[string]string{"box_and_whisker": "box-and-whisker chart", "superchart": "figure of several charts"}[c.Type]
	if kind == "" {
		kind = c.Type + " chart"
	}
	s := kind
	if c.Title != nil && *c.Title != "" {
		s += " " + strconv.Quote(*c.Title)
	}
	units := map[string][2]string{"line": {"series", "series"}, "scatter": {"series", "series"}, "bar": {"bar", "bars"},
		"pie": {"slice", "slices"}, "box_and_whisker": {"box", "boxes"}, "superchart": {"chart", "charts"}}
	if unit, ok := units[c.Type]; ok {
		n := len(c.Elements)
		s += fmt.Sprintf(" (%d %s)", n, unit[min(n, 2)/2])
	}
	return s
}

// ChartSummary is d's chart summary (see ChartSummary), empty when d has no chart.
func (d Display) ChartSummary() string { return ChartSummary(d.Data[ChartMIME]) }
