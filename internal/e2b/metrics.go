package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/session"
)

// metricJSON is E2B's SandboxMetric (spec/openapi.yml): one sample of a sandbox's use, bytes
// and percent of its CPUs.
type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// maxMetricsSandboxes is how many sandboxes one GET /sandboxes/metrics may name.
const maxMetricsSandboxes = 100

// metricsTimeout bounds the reading of one sandbox's sample (the engine's takes about a second).
const metricsTimeout = 10 * time.Second

// sample reads b's sample now; ok is false when it has no sandbox now (paused to disk).
func (s *Server) sample(ctx context.Context, b *box) (metricJSON, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	st, ok, err := b.sess.Stats(ctx)
	if err != nil || !ok {
		return metricJSON{}, false, err
	}
	at := st.At.UTC().Truncate(time.Second)
	return metricJSON{Timestamp: at, TimestampUnix: at.Unix(), CPUCount: st.CPUs, CPUUsedPct: float64(int(st.CPUPercent*100)) / 100,
		MemUsed: st.MemoryBytes, MemTotal: st.MemoryLimitBytes, MemCache: st.MemoryCacheBytes,
		DiskUsed: st.DiskBytes, DiskTotal: st.DiskLimitBytes}, true, nil
}

// metrics is GET /sandboxes/{id}/metrics: sandpit keeps no history, so the list holds one
// sample read now (none for a sandbox whose memory is on disk), whatever start and end ask.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, agent string) {
	b := s.lookup(w, r, agent)
	if b == nil {
		return
	}
	m, ok, err := s.sample(r.Context(), b)
	if err != nil {
		s.metricsError(w, r, err)
		return
	}
	out := []metricJSON{}
	if ok {
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}

// metricsOfMany is GET /sandboxes/metrics?sandbox_ids=a,b: the latest sample of each named
// sandbox of the key's agent that has one (E2B's SandboxesWithMetrics); names of others are
// left out, as E2B does.
func (s *Server) metricsOfMany(w http.ResponseWriter, r *http.Request, agent string) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 || len(ids) > maxMetricsSandboxes {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("sandbox_ids names %d sandboxes; name 1 to %d, separated by commas", len(ids), maxMetricsSandboxes))
		return
	}
	out := map[string]metricJSON{}
	for _, id := range ids {
		s.mu.Lock()
		b := s.boxes[id]
		s.mu.Unlock()
		if b == nil || b.agent != agent || s.state(b) == "" {
			continue
		}
		m, ok, err := s.sample(r.Context(), b)
		if err != nil {
			s.metricsError(w, r, err)
			return
		}
		if ok {
			out[id] = m
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

// metricsError answers a sample that could not be read.
func (s *Server) metricsError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, session.ErrNoStats) {
		unsupported("sandbox metrics on this daemon's runtime (kubernetes)")(w, r)
		return
	}
	s.log.Warn("reading a sandbox's metrics", "error", err)
	writeError(w, http.StatusInternalServerError, "reading the sandbox's metrics: "+err.Error())
}
