package boxspec

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// A session's files as a tar stream (sandbox.FilesBox), as both runtimes save them: GNU tar
// run as root in the box over the engine's exec.

// SaveFiles runs SaveFilesCommand for dir with run, which runs a command as root in the box
// with its stdout to the stream, and fails with an *ExitError when it exits non-zero. A file
// that changed while it was read is kept as read, and logged (filesChangedWhileSaved).
func SaveFiles(log *slog.Logger, dir string, run func(cmd []string) error) error {
	err := run(SaveFilesCommand(dir))
	if filesChangedWhileSaved(err) {
		log.Warn("a session's file changed while its files were saved; it is kept as read", "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("saving the session's files: %w", err)
	}
	return nil
}

// SaveFilesCommand is the command that writes the session's home (dir) to its stdout as a tar
// stream: numeric owners; symbolic links kept as links, never followed; sparse files kept
// sparse (--sparse: a file of holes, made with truncate in a command, was stored at its full
// size, 180 MB for 36 KiB used, and its session could no longer be resumed into its tmpfs;
// trial, 2 December 2026).
func SaveFilesCommand(dir string) []string {
	return []string{"tar", "--numeric-owner", "--sparse", "-C", dir, "-cf", "-", "."}
}

// FilesSizeCommand is the command that writes to its stdout the bytes SaveFilesCommand would
// write for dir now, as GNU tar counts them on a line "Total bytes written: N (…)": an archive
// made to /dev/null, whose files' bytes tar does not read (its headers, sparse maps and sizes
// are the same).
func FilesSizeCommand(dir string) []string {
	return []string{"sh", "-c", `tar --numeric-owner --sparse --totals -C "$1" -cf /dev/null . 2>&1 | grep '^Total bytes written: '`, "sh", dir}
}

// FilesSize runs FilesSizeCommand for dir with run (as SaveFiles does) and returns the count.
func FilesSize(dir string, run func(cmd []string, stdout io.Writer) error) (int64, error) {
	var out strings.Builder
	if err := run(FilesSizeCommand(dir), &out); err != nil {
		return 0, fmt.Errorf("counting the session's files: %w", err)
	}
	var n int64
	if _, err := fmt.Sscanf(strings.TrimSpace(out.String()), "Total bytes written: %d", &n); err != nil {
		return 0, fmt.Errorf("counting the session's files: tar answered %.200q: %w", out.String(), err)
	}
	return n, nil
}

// ExitError is a command run in a box over the engine's exec that exited non-zero.
type ExitError struct {
	Cmd    []string
	Code   int    // its exit status
	Stderr string // the start of its stderr, trimmed
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s exited with status %d: %s", strings.Join(e.Cmd, " "), e.Code, e.Stderr)
}

// filesChangedWhileSaved reports whether err is SaveFilesCommand's exit status 1: GNU tar's
// "some files differ", for --create a file that changed while it was read (a session's
// background process writing during a hibernation or a fork). The stream is whole and valid,
// that file as tar read it; it is kept, as any copy of live files would be, not refused: a
// session with a process that writes on a timer could otherwise never be hibernated.
func filesChangedWhileSaved(err error) bool {
	var x *ExitError
	return errors.As(err, &x) && x.Code == 1
}
