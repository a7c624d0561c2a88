package console_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRecordPage renders the page of a record whose 1 MiB stdout changes colour at every
// character (the worst case for spans: capped at 20 000, the rest plain text).
func BenchmarkRecordPage(b *testing.B) {
	h := newHarness(b, "")
	stdout := strings.Repeat("\x1b[31mx\x1b[32my", 1<<20/12)
	id := h.add(b, record{code: strings.Repeat("x = 1  # comment\n", 1000), stdout: stdout})
	c := client(b)
	b.ResetTimer()
	var size int
	for range b.N {
		resp, err := c.Get(h.srv.URL + "/ui/executions/" + id)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatal(err, resp.StatusCode)
		}
		buf := new(strings.Builder)
		m, _ := io.Copy(buf, resp.Body)
		resp.Body.Close()
		size = int(m)
	}
	b.ReportMetric(float64(size), "page-bytes")
}
