package console

import "strings"

// DiffLine is a line of a diff: Op is " " (in both), "-" (only in the old) or "+" (only in
// the new).
type DiffLine struct {
	Op   string
	Text string
}

// maxDiffCells bounds the work of a diff (the product of the differing lines' counts); past
// it the differing middles are shown as removed then added.
const maxDiffCells = 4 << 20

// LineDiff returns the lines of a and b as a diff: the common beginning and end, and between
// them a longest-common-subsequence diff when it costs at most maxDiffCells.
func LineDiff(a, b string) []DiffLine {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []DiffLine
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		out = append(out, DiffLine{" ", x[pre]})
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	mx, my := x[pre:len(x)-suf], y[pre:len(y)-suf]
	if len(mx)*len(my) <= maxDiffCells {
		out = append(out, lcsDiff(mx, my)...)
	} else {
		for _, l := range mx {
			out = append(out, DiffLine{"-", l})
		}
		for _, l := range my {
			out = append(out, DiffLine{"+", l})
		}
	}
	for _, l := range x[len(x)-suf:] {
		out = append(out, DiffLine{" ", l})
	}
	return out
}

func lcsDiff(x, y []string) []DiffLine {
	n, m := len(x), len(y)
	// l[i][j] is the LCS length of x[i:] and y[j:], in one slice.
	l := make([]int32, (n+1)*(m+1))
	at := func(i, j int) *int32 { return &l[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				*at(i, j) = *at(i+1, j+1) + 1
			} else {
				*at(i, j) = max(*at(i+1, j), *at(i, j+1))
			}
		}
	}
	var out []DiffLine
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case x[i] == y[j]:
			out = append(out, DiffLine{" ", x[i]})
			i++
			j++
		case *at(i+1, j) >= *at(i, j+1):
			out = append(out, DiffLine{"-", x[i]})
			i++
		default:
			out = append(out, DiffLine{"+", y[j]})
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, DiffLine{"-", x[i]})
	}
	for ; j < m; j++ {
		out = append(out, DiffLine{"+", y[j]})
	}
	return out
}
