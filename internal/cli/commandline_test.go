package cli

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// TestSignalNumber: a command's end names its signal as the executor does, "SIGKILL", or
// "signal 1" for one it has no name of (a command hung up exited 1, not 129).
func TestSignalNumber(t *testing.T) {
	for name, want := range map[string]int{"SIGKILL": 9, "SIGHUP": 1, "SIGUSR1": int(unix.SIGUSR1), "SIGWINCH": int(unix.SIGWINCH), "signal 1": 1, "signal 34": 34, "": 0, "SIGNOPE": 0, "signal x": 0} {
		if got := signalNumber(name); got != want {
			t.Errorf("signalNumber(%q) = %d, want %d", name, got, want)
		}
	}
}
