package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted, a list of durations in
// ascending order, by the nearest-rank method: the smallest value such that at least p percent
// of the values are less than or equal to it, that is sorted[⌈p/100·n⌉-1]. No interpolation:
// the answer is always one of the measured values, so with 20 values p95 is the 19th and p99
// the largest. It returns 0 for an empty list; p at or below 0 gives the smallest value.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	return sorted[min(max(rank, 1), n)-1]
}

// Summary describes a list of durations: their count, nearest-rank percentiles (see
// Percentile) and the sequential rate they add up to.
type Summary struct {
	// Runs is how many durations were measured.
	Runs int
	// P50, P95 and P99 are nearest-rank percentiles.
	P50, P95, P99 time.Duration
	// Total is the sum of the durations.
	Total time.Duration
}

// Summarize computes the Summary of durations (in any order; the slice is not modified).
func Summarize(durations []time.Duration) Summary {
	sorted := slices.Clone(durations)
	slices.Sort(sorted)
	var total time.Duration
	for _, d := range sorted {
		total += d
	}
	return Summary{
		Runs:  len(sorted),
		P50:   Percentile(sorted, 50),
		P95:   Percentile(sorted, 95),
		P99:   Percentile(sorted, 99),
		Total: total,
	}
}

// RunsPerSec is the rate of one client running the measured runs back to back: Runs divided
// by Total, in runs per second; 0 when nothing was measured.
func (s Summary) RunsPerSec() float64 {
	if s.Runs == 0 || s.Total <= 0 {
		return 0
	}
	return float64(s.Runs) / s.Total.Seconds()
}

// Rate is count events over elapsed, in events per second; 0 when elapsed is not positive.
func Rate(count int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(count) / elapsed.Seconds()
}

// Ratio is a / b, or ok false when either is not a positive, finite number (a ratio of
// measurements that were not taken means nothing).
func Ratio(a, b float64) (r float64, ok bool) {
	if !(a > 0) || !(b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0, false
	}
	return a / b, true
}

// ms converts d to milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
