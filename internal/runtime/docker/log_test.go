package docker

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestLineLoggerForwardsExecutorRecords(t *testing.T) {
	var out bytes.Buffer
	l := &lineLogger{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))}
	l.Write([]byte(`{"level":"WARN","msg":"killing a stale executor","pid":8,"data_bytes":44126208}` + "\n" + `plain te`))
	l.Write([]byte("xt\n"))
	l.flush()
	got := out.String()
	for _, want := range []string{`level=WARN msg="killing a stale executor" data_bytes=44126208 pid=8`, `level=INFO msg="plain text"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
}
