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

func TestEscapeNameAndText(t *testing.T) {
	for in, want := range map[string]string{
		"plain name.csv":       "plain name.csv",
		"a\nb":                 `a\nb`,
		"\x1b[31mred":          `\x1b[31mred`,
		"invoice\u202efdp.exe": `invoice\u202efdp.exe`,
		"tab\there\r":          `tab\there\r`,
		"日本":                   "日本",
	} {
		if got := EscapeName(in); got != want {
			t.Errorf("EscapeName(%q) = %q, want %q", in, got, want)
		}
	}
	// A dependency_error's reason, with pip's lines (the CLI printed its line feeds as \n).
	for in, want := range map[string]string{
		"installing tabulate failed:\nERROR: No matching distribution\nthe proxy refused": "installing tabulate failed:\nERROR: No matching distribution\nthe proxy refused",
		"one line":                      "one line",
		"over\rwritten\n\x1b[2Jcleared": "over\\rwritten\n\\x1b[2Jcleared",
		"trailing\n":                    "trailing\n",
	} {
		if got := EscapeText(in); got != want {
			t.Errorf("EscapeText(%q) = %q, want %q", in, got, want)
		}
	}
}
