package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

func msList(values ...int) []time.Duration {
	out := make([]time.Duration, len(values))
	for i, v := range values {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	ten := msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	twenty := msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value is every percentile", msList(7), 99, 7 * time.Millisecond},
		{"p50 of ten is the fifth", ten, 50, 5 * time.Millisecond},
		{"p95 of ten rounds the rank up to the tenth", ten, 95, 10 * time.Millisecond},
		{"p90 of ten is exactly the ninth", ten, 90, 9 * time.Millisecond},
		{"p95 of twenty is the nineteenth", twenty, 95, 19 * time.Millisecond},
		{"p99 of twenty is the largest", twenty, 99, 20 * time.Millisecond},
		{"p100 is the largest", ten, 100, 10 * time.Millisecond},
		{"p0 is the smallest", ten, 0, 1 * time.Millisecond},
		{"p above 100 is the largest", ten, 150, 10 * time.Millisecond},
		{"p50 of two is the first (no interpolation)", msList(10, 20), 50, 10 * time.Millisecond},
		{"p51 of two is the second", msList(10, 20), 51, 20 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.sorted, c.p); got != c.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", c.sorted, c.p, got, c.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	in := msList(30, 10, 20, 40)
	orig := slices.Clone(in)
	s := Summarize(in)
	if !slices.Equal(in, orig) {
		t.Errorf("Summarize reordered its input: %v", in)
	}
	want := Summary{Runs: 4, P50: 20 * time.Millisecond, P95: 40 * time.Millisecond, P99: 40 * time.Millisecond, Total: 100 * time.Millisecond}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if got := s.RunsPerSec(); got != 40 {
		t.Errorf("RunsPerSec = %v, want 40 (4 runs in 100 ms)", got)
	}
	if got := Summarize(nil); got != (Summary{}) || got.RunsPerSec() != 0 {
		t.Errorf("Summarize(nil) = %+v (rate %v), want zero", got, got.RunsPerSec())
	}
}

func TestRateAndRatio(t *testing.T) {
	if got := Rate(50, 2*time.Second); got != 25 {
		t.Errorf("Rate(50, 2s) = %v, want 25", got)
	}
	if got := Rate(5, 0); got != 0 {
		t.Errorf("Rate(5, 0) = %v, want 0", got)
	}
	if r, ok := Ratio(6, 4); !ok || r != 1.5 {
		t.Errorf("Ratio(6, 4) = %v, %v; want 1.5, true", r, ok)
	}
	for _, c := range [][2]float64{{0, 1}, {1, 0}, {-1, 1}, {math.NaN(), 1}, {1, math.Inf(1)}} {
		if r, ok := Ratio(c[0], c[1]); ok {
			t.Errorf("Ratio(%v, %v) = %v, true; want not ok", c[0], c[1], r)
		}
	}
}

func TestMSRoundsToTheMicrosecond(t *testing.T) {
	if got := ms(1234567 * time.Nanosecond); got != 1.235 {
		t.Errorf("ms(1.234567ms) = %v, want 1.235", got)
	}
}
