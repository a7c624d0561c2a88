// Package suggest finds the name a user probably meant ("did you mean ...?") for unknown keys
// in requests and configuration.
package suggest

import "strings"

// Nearest returns the candidate closest to name (case-insensitively) by edit distance with
// transpositions (optimal string alignment), if it is within maxDist edits; otherwise a
// candidate that name is a prefix of (for names of 4 or more letters), or "".
func Nearest(name string, candidates []string, maxDist int) string {
	name = strings.ToLower(name)
	best, bestDist := "", maxDist+1
	for _, c := range candidates {
		if d := Distance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" && len(name) >= 4 {
		for _, c := range candidates {
			if strings.HasPrefix(c, name) {
				return c
			}
		}
	}
	return best
}

// Distance is the optimal-string-alignment distance between a and b: insertions, deletions,
// substitutions and transpositions of adjacent bytes each cost one.
func Distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
