package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDaemon serves POST /v1/executions and GET /readyz like a daemon; answer decides each
// execution's answer from the request's sequence number (1, 2, ...).
func fakeDaemon(t *testing.T, answer func(n int64, w http.ResponseWriter, body map[string]any)) *restClient {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":{"code":"unauthorized"}}`, http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/readyz":
			w.Write([]byte(`{"status":"ready"}`))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/executions":
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var body map[string]any
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				t.Errorf("decoding the request: %v", err)
			}
			answer(n.Add(1), w, body)
		default:
			http.NotFound(w, r)
		}
	}))
	c := newRESTClient(srv.URL, "tok", 4)
	t.Cleanup(func() {
		c.close()
		srv.Close()
	})
	return c
}

func okAnswer(start string) func(int64, http.ResponseWriter, map[string]any) {
	return func(_ int64, w http.ResponseWriter, body map[string]any) {
		res := map[string]any{"outcome": "ok", "stdout": "1\n", "exit_code": 0}
		if start != "" {
			res["start"] = start
		}
		json.NewEncoder(w).Encode(res)
	}
}

func TestSequentialReadsStart(t *testing.T) {
	var mu sync.Mutex
	var sawBody map[string]any
	c := fakeDaemon(t, func(n int64, w http.ResponseWriter, body map[string]any) {
		mu.Lock()
		sawBody = body
		mu.Unlock()
		start := "fork"
		if n == 1 {
			start = "cold"
		}
		okAnswer(start)(n, w, body)
	})
	durations, starts, err := c.sequential(context.Background(), printProgram(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(durations) != 5 {
		t.Errorf("%d durations, want 5", len(durations))
	}
	if starts["fork"] != 4 || starts["cold"] != 1 || len(starts) != 2 {
		t.Errorf("starts = %v, want 4 fork and 1 cold", starts)
	}
	mu.Lock()
	defer mu.Unlock()
	if sawBody["code"] != "print(1)" || sawBody["timeout_ms"] != float64(runTimeoutMS) {
		t.Errorf("request body %v", sawBody)
	}
}

func TestSequentialWithoutStart(t *testing.T) {
	c := fakeDaemon(t, okAnswer(""))
	_, starts, err := c.sequential(context.Background(), printProgram(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 0 {
		t.Errorf("starts = %v from a daemon that reports none", starts)
	}
}

func TestSequentialFailsOnABadRun(t *testing.T) {
	cases := []struct {
		name   string
		answer func(int64, http.ResponseWriter, map[string]any)
		want   string
	}{
		{"outcome", func(_ int64, w http.ResponseWriter, _ map[string]any) {
			w.Write([]byte(`{"outcome":"error","stderr":"Traceback...\nNameError: x\n"}`))
		}, `outcome "error": Traceback`},
		{"stdout", func(_ int64, w http.ResponseWriter, _ map[string]any) {
			w.Write([]byte(`{"outcome":"ok","stdout":"2\n"}`))
		}, `printed "2\n"`},
		{"status", func(_ int64, w http.ResponseWriter, _ map[string]any) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"not_ready","message":"the sandbox is restarting"}}`))
		}, "HTTP 503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeDaemon(t, tc.answer)
			_, _, err := c.sequential(context.Background(), printProgram(), 3)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestThroughputCountsEachKindOfAnswer(t *testing.T) {
	c := fakeDaemon(t, func(n int64, w http.ResponseWriter, body map[string]any) {
		switch n % 5 {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":{"code":"busy"}}`))
		case 2:
			w.Write([]byte(`{"outcome":"timeout","reason":"ran past 30000 ms"}`))
		case 3:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			time.Sleep(2 * time.Millisecond)
			okAnswer("fork")(n, w, body)
		}
	})
	l, err := c.throughput(context.Background(), printProgram(), 4, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	total := len(l.ok) + l.busy + l.notOK + l.errors
	if l.clients != 4 || len(l.ok) == 0 || l.busy == 0 || l.notOK == 0 || l.errors == 0 {
		t.Fatalf("load = %d ok, %d busy, %d not ok, %d errors; want some of each", len(l.ok), l.busy, l.notOK, l.errors)
	}
	// Each kind is a fifth of the answers (two fifths for ok), give or take the last round.
	if d := l.busy - total/5; d < -4 || d > 4 {
		t.Errorf("%d busy of %d answers, want about a fifth", l.busy, total)
	}
	if l.elapsed < 200*time.Millisecond {
		t.Errorf("elapsed %v, shorter than the level's duration", l.elapsed)
	}
	if l.lastErr == nil {
		t.Error("no last error recorded")
	}
}

func TestThroughputStopsWithContext(t *testing.T) {
	c := fakeDaemon(t, okAnswer(""))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	// The level lasts a minute: the context's error, not a result, says it stopped early.
	_, err := c.throughput(ctx, printProgram(), 2, time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("throughput after its context ended: %v; want context.Canceled", err)
	}
}

func TestReady(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"not_ready"}`))
			return
		}
		w.Write([]byte(`{"status":"ready"}`))
	}))
	defer srv.Close()
	c := newRESTClient(srv.URL, "", 1)
	defer c.close()

	time.AfterFunc(50*time.Millisecond, func() { ready.Store(true) })
	if err := c.ready(context.Background(), 10*time.Millisecond, nil); err != nil {
		t.Fatalf("ready: %v", err)
	}

	ready.Store(false)
	// The deadline cuts a probe short: the error still names the last answer (it named the
	// cut probe, CI 2026-12-02).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.ready(ctx, 10*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("ready on a daemon that never is: %v, want the last answer (HTTP 503)", err)
	}

	stopped := make(chan struct{})
	close(stopped)
	if err := c.ready(context.Background(), 10*time.Millisecond, stopped); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("ready on a daemon that exited: %v", err)
	}
}
