package cli

import (
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// TestCommandLine: a recorded command's line is one escaped line, marked when the ledger kept
// only its start.
func TestCommandLine(t *testing.T) {
	if got := commandLine(apitype.Process{Command: "ls \x1b]0;x\x07"}); got != `ls \x1b]0;x\a` {
		t.Errorf("escaped: %q", got)
	}
	long := "echo " + strings.Repeat("y", 4091)
	if got := commandLine(apitype.Process{Command: long}); strings.Contains(got, "cut") {
		t.Errorf("a whole line marked cut: %q", got)
	}
	if got := commandLine(apitype.Process{Command: long, CommandTruncated: true}); !strings.HasSuffix(got, "… [cut at 4096 bytes]") {
		t.Errorf("a cut line not marked: %q", got)
	}
}

// TestEntryName: file names and link targets reach the terminal escaped.
func TestEntryName(t *testing.T) {
	for e, want := range map[apitype.FileEntry]string{
		{Path: "/home/user/a\x1b]0;x\x07b", Type: "file"}:          `/home/user/a\x1b]0;x\ab`,
		{Path: "/home/user/d\tir", Type: "dir"}:                    `/home/user/d\tir/`,
		{Path: "/home/user/l", Type: "symlink", Target: "\x1b[2J"}: `/home/user/l -> \x1b[2J`,
	} {
		if got := entryName(e); got != want {
			t.Errorf("%q: %q, want %q", e.Path, got, want)
		}
	}
}
