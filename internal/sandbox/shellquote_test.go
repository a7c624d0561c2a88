package sandbox

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestShellQuote: argv is rendered so that a POSIX shell reads back the same arguments.
func TestShellQuote(t *testing.T) {
	if got := ShellQuote([]string{"echo", "a b", "c;d"}); got != `echo 'a b' 'c;d'` {
		t.Errorf("got %s", got)
	}
	for _, argv := range [][]string{
		{"echo", "a b", "c;d"},
		{"printf", "%s", "it's", "", "$(id)", "`id`", "a\nb", "*", "~", "x=1", "-n", "\x1b]0;t\x07"},
	} {
		sh := "for a in " + ShellQuote(argv[1:]) + `; do printf '[%s]' "$a"; done`
		out, err := exec.Command("sh", "-c", sh).Output()
		if err != nil {
			t.Fatalf("%q: %v", sh, err)
		}
		var want strings.Builder
		for _, a := range argv[1:] {
			want.WriteString("[" + a + "]")
		}
		if string(out) != want.String() {
			t.Errorf("the shell read %q back as %q", slices.Clone(argv[1:]), out)
		}
	}
}
