package sandbox

import (
	"strings"
	"testing"
)

func TestCheckFileName(t *testing.T) {
	for _, ok := range []string{"data.csv", "in/a.json", "日本.txt", "a b", ".hidden", "x..y"} {
		if err := CheckFileName(ok); err != nil {
			t.Errorf("CheckFileName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "../x", "a/../../x", "a//b", "a/", "./a", ".", "..",
		"a\x00b", "a\nb", "a\\b", "\x7f", "\u0085", strings.Repeat("a", MaxFileNameBytes+1), "\xff"} {
		if err := CheckFileName(bad); err == nil {
			t.Errorf("CheckFileName(%q) = nil, want an error", bad)
		}
	}
}
