package app_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// chartsCode shows a line chart, a bar chart and a pie, one figure each.
const chartsCode = `import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [2, 4, 3], label="visits")
plt.title("Traffic")
plt.xlabel("Time (s)")
plt.ylabel("Visits")
plt.show()
plt.bar(["Oslo", "Lima", "Pune"], [3, 7, 5], label="sales")
plt.title("Sales")
plt.show()
plt.pie([75, 25], labels=["yes", "no"])
plt.title("Vote")
plt.show()
`

// checkCharts fails unless charts (each figure's chart as data, in the order shown) describe
// chartsCode's figures as E2B's code interpreter does.
func checkCharts(t *testing.T, door string, charts []json.RawMessage) {
	t.Helper()
	if len(charts) != 3 {
		t.Fatalf("%s: %d charts, want 3", door, len(charts))
	}
	type point = [2]float64
	var line struct {
		Type     string    `json:"type"`
		Title    string    `json:"title"`
		XLabel   string    `json:"x_label"`
		YLabel   string    `json:"y_label"`
		XUnit    string    `json:"x_unit"`
		XScale   string    `json:"x_scale"`
		XTicks   []float64 `json:"x_ticks"`
		Elements []struct {
			Label  string  `json:"label"`
			Points []point `json:"points"`
		} `json:"elements"`
	}
	var bar struct {
		Type, Title string
		Elements    []struct {
			Label, Group string
			Value        float64
		}
	}
	var pie struct {
		Type, Title string
		Elements    []struct {
			Label         string
			Angle, Radius float64
		}
	}
	for i, v := range []any{&line, &bar, &pie} {
		if err := json.Unmarshal(charts[i], v); err != nil {
			t.Fatalf("%s: chart %d %s: %v", door, i+1, charts[i], err)
		}
	}
	if line.Type != "line" || line.Title != "Traffic" || line.XLabel != "Time (s)" || line.YLabel != "Visits" ||
		line.XUnit != "s" || line.XScale != "linear" || len(line.XTicks) == 0 || len(line.Elements) != 1 ||
		line.Elements[0].Label != "visits" || !reflect.DeepEqual(line.Elements[0].Points, []point{{1, 2}, {2, 4}, {3, 3}}) {
		t.Errorf("%s: the line chart is %s", door, charts[0])
	}
	type barEl = struct {
		Label, Group string
		Value        float64
	}
	if want := []barEl{{"Oslo", "sales", 3}, {"Lima", "sales", 7}, {"Pune", "sales", 5}}; bar.Type != "bar" ||
		bar.Title != "Sales" || len(bar.Elements) != 3 || !reflect.DeepEqual([]barEl{bar.Elements[0], bar.Elements[1], bar.Elements[2]}, want) {
		t.Errorf("%s: the bar chart is %s", door, charts[1])
	}
	if pie.Type != "pie" || pie.Title != "Vote" || len(pie.Elements) != 2 || pie.Elements[0].Label != "yes" ||
		pie.Elements[0].Angle != 270 || pie.Elements[1].Label != "no" || pie.Elements[1].Angle != 90 || pie.Elements[0].Radius != 1 {
		t.Errorf("%s: the pie is %s", door, charts[2])
	}
}

// TestChartsAsData: a line chart, a bar chart and a pie shown through the real engine come
// back, beside their PNGs, as charts in E2B's shape: in REST results as e2b/chart, and as the
// result's chart on the E2B door, which E2B's SDK reads into Result.chart.
func TestChartsAsData(t *testing.T) {
	cfg := testConfig(t)
	cfg.Slots, cfg.ForkServer, cfg.E2BPool = 1, false, 1
	base, _ := startDaemon(t, cfg)

	body, _ := json.Marshal(map[string]any{"code": chartsCode, "timeout_ms": 180000})
	resp, err := http.Post(base+"/v1/executions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var res apitype.Result
	err = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || res.Outcome != "ok" {
		t.Fatalf("REST run: status %d, %v, %+v", resp.StatusCode, err, res)
	}
	var charts []json.RawMessage
	for _, d := range res.Results {
		if _, ok := d.Data["image/png"]; !ok {
			t.Errorf("REST: a display without its PNG: %v", d.Data["text/plain"])
		}
		charts = append(charts, d.Data[apitype.ChartMIME])
	}
	checkCharts(t, "REST", charts)
	if s := res.Results[0].ChartSummary(); s != `line chart "Traffic" (1 series)` {
		t.Errorf("the line chart's summary (MCP's caption, the console's) is %q", s)
	}

	st, err := app.OpenKeys(t.Context(), cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := st.CreateAPIKey(t.Context(), "plotter", "test")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &e2bclient.Client{APIURL: base + app.E2BPrefix, SandboxURL: base + app.E2BPrefix, APIKey: key}
	sb, err := c.Create(t.Context(), map[string]any{"templateID": "code-interpreter-v1", "timeout": 300})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := c.Conn(sb.SandboxID, sb.EnvdAccessToken).RunCode(t.Context(), chartsCode, "", nil)
	if err != nil || ex.Error != nil || len(ex.Results) != 3 {
		t.Fatalf("run_code: %+v %v", ex, err)
	}
	charts = nil
	for _, r := range ex.Results {
		if r["png"] == nil {
			t.Errorf("E2B: a result without its png: %v", r["text"])
		}
		raw, _ := json.Marshal(r["chart"])
		charts = append(charts, raw)
	}
	checkCharts(t, "E2B", charts)
}
