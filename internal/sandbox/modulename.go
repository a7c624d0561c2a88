package sandbox

import "strings"

// IsModuleName reports whether s is a dotted Python module name of ASCII identifiers
// ("numpy", "scipy.stats").
func IsModuleName(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if part == "" || (part[0] >= '0' && part[0] <= '9') {
			return false
		}
		for _, r := range part {
			if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return false
			}
		}
	}
	return true
}
