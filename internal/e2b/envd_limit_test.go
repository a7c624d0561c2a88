package e2b

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRPCMessagesAreBounded: a Connect message over MaxRPCMessageBytes is refused, also when it
// arrives small and gzipped (a trial's 300 MiB List body, and a 400 KB gzip that unpacked to
// 400 MiB, each took the daemon past 1 GB before it answered 200).
func TestRPCMessagesAreBounded(t *testing.T) {
	h := (&Server{}).envdRoutes()
	big := "{" + strings.Repeat(" ", MaxRPCMessageBytes+1) + "}"
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write([]byte(big))
	_ = zw.Close()
	for _, c := range []struct {
		name, encoding string
		body           []byte
	}{{"plain", "", []byte(big)}, {"gzip", "gzip", zipped.Bytes()}} {
		req := httptest.NewRequest(http.MethodPost, "/process.Process/List", bytes.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if c.encoding != "" {
			req.Header.Set("Content-Encoding", c.encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK || !strings.Contains(rec.Body.String(), "resource_exhausted") {
			t.Errorf("%s: a message of %d bytes got %d %.200s, want resource_exhausted", c.name, len(big), rec.Code, rec.Body.String())
		}
	}
}
