package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's files by path, served by its box: paths are the session's view (relative ones
// are under its home), and links are never followed (see sandbox.Workspace).

const (
	// MaxReadBytes is the most one file read returns; a larger file is read in ranges.
	MaxReadBytes = 32 << 20
	// writeChunk is how much of a write goes to the box in one message.
	writeChunk = 8 << 20
	// maxListEntries caps one listing.
	maxListEntries = 10_000
)

// box returns s's box ready for work, marking the session used: a paused one is resumed when
// it was created with auto_resume, else a *SessionPausedError (a frozen box would answer
// nothing).
func (s *Session) box(ctx context.Context) (sandbox.SessionBox, error) {
	h, err := s.callable(ctx)
	if err != nil {
		return nil, err
	}
	s.touch()
	return h.box, nil
}

// ReadFile reads a file of the session: length bytes from offset (0: to the end), at most
// MaxReadBytes (more is a too-large error naming the limit). The read counts against the
// daemon's budget of reads in flight (Config.ReadsMaxBytes; no room within a moment: an error
// of class busy) until the answer's Release is called: call it once the answer is written. A
// session's large reads run one at a time, the others waiting (bounded by ctx).
func (s *Session) ReadFile(ctx context.Context, p string, offset, length int64) (sandbox.FileContent, error) {
	h, err := s.callable(ctx)
	if err != nil {
		return sandbox.FileContent{}, err
	}
	s.touch()
	return s.r.read(ctx, h, s.Agent(), sandbox.FileRead{Path: p, Offset: offset, Length: length, MaxBytes: MaxReadBytes})
}

// WriteFile creates or replaces the file p of the session with what rd holds (making its
// parent directories when parents is set). It is written to a temporary file beside it and
// renamed into place: a failed write (the session's disk cap) leaves neither half a file nor
// a changed one.
func (s *Session) WriteFile(ctx context.Context, p string, rd io.Reader, parents bool) (sandbox.FileEntry, error) {
	b, err := s.box(ctx)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	// The first part grows with what rd holds (a small file takes no writeChunk of memory).
	var first bytes.Buffer
	if _, err := first.ReadFrom(io.LimitReader(rd, writeChunk)); err != nil {
		return sandbox.FileEntry{}, fmt.Errorf("reading the file's content: %w", err)
	}
	buf := first.Bytes()
	if len(buf) < writeChunk {
		return b.WriteFile(ctx, sandbox.FileWrite{Path: p, Content: buf, Parents: parents})
	}
	// Larger than one message: in parts, to a temporary name, then renamed.
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	dir, base := path.Split(p)
	tmp := dir + ".sandpit-upload-" + hex.EncodeToString(suffix[:]) + "-" + base
	if len(tmp) > 4000 {
		return sandbox.FileEntry{}, &sandbox.FieldError{Field: "path", Message: "is too long"}
	}
	fail := func(err error) (sandbox.FileEntry, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.RemoveFile(cctx, sandbox.FileRemove{Path: tmp})
		return sandbox.FileEntry{}, err
	}
	if _, err := b.WriteFile(ctx, sandbox.FileWrite{Path: tmp, Content: buf, Parents: parents}); err != nil {
		return fail(err)
	}
	for {
		n, rerr := io.ReadFull(rd, buf)
		if n > 0 {
			if _, err := b.WriteFile(ctx, sandbox.FileWrite{Path: tmp, Content: buf[:n], Append: true}); err != nil {
				return fail(err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fail(fmt.Errorf("reading the file's content: %w", rerr))
		}
	}
	ent, err := b.RenameFile(ctx, sandbox.FileRename{From: tmp, To: p, Overwrite: true})
	if err != nil {
		return fail(err)
	}
	return ent, nil
}

// ListFiles lists the directory p of the session ("": its home), depth levels down (1: its
// entries).
func (s *Session) ListFiles(ctx context.Context, p string, depth int) (sandbox.FileListing, error) {
	return s.ListFilesUpTo(ctx, p, depth, maxListEntries)
}

// ListFilesUpTo lists like ListFiles, the box stopping its walk after maxEntries entries
// (at most ListFiles' cap; the answer says Truncated).
func (s *Session) ListFilesUpTo(ctx context.Context, p string, depth, maxEntries int) (sandbox.FileListing, error) {
	if maxEntries <= 0 || maxEntries > maxListEntries {
		maxEntries = maxListEntries
	}
	if p == "" {
		p = sandbox.SessionHome
	}
	if depth < 0 || depth > 64 {
		return sandbox.FileListing{}, &sandbox.FieldError{Field: "depth", Message: fmt.Sprintf("is %d; allowed range is 1 to 64", depth)}
	}
	b, err := s.box(ctx)
	if err != nil {
		return sandbox.FileListing{}, err
	}
	return b.ListFiles(ctx, sandbox.FileList{Path: p, Depth: depth, MaxEntries: maxEntries})
}

// StatFile describes the path p of the session.
func (s *Session) StatFile(ctx context.Context, p string) (sandbox.FileEntry, error) {
	b, err := s.box(ctx)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return b.StatFile(ctx, sandbox.FileStat{Path: p})
}

// MakeDir makes the directory p of the session (and its parents, when set).
func (s *Session) MakeDir(ctx context.Context, p string, parents bool) (sandbox.FileEntry, error) {
	b, err := s.box(ctx)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return b.MakeDir(ctx, sandbox.FileMkdir{Path: p, Parents: parents})
}

// RenameFile renames or moves from to to in the session (replacing to only when overwrite is
// set).
func (s *Session) RenameFile(ctx context.Context, from, to string, overwrite bool) (sandbox.FileEntry, error) {
	b, err := s.box(ctx)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return b.RenameFile(ctx, sandbox.FileRename{From: from, To: to, Overwrite: overwrite})
}

// RemoveFile removes the path p of the session (a directory with its contents only when
// recursive is set).
func (s *Session) RemoveFile(ctx context.Context, p string, recursive bool) error {
	b, err := s.box(ctx)
	if err != nil {
		return err
	}
	return b.RemoveFile(ctx, sandbox.FileRemove{Path: p, Recursive: recursive})
}

// LookFiles lists like ListFiles and LookFile reads like ReadFile, for someone looking on (the
// web console): only while the session is active, without resuming a paused or hibernated one
// (auto_resume or not: a *sandbox.SessionPausedError) and without counting as its use (its
// idle timeout runs on).
func (s *Session) LookFiles(ctx context.Context, p string, depth int) (sandbox.FileListing, error) {
	if p == "" {
		p = sandbox.SessionHome
	}
	h, err := s.active()
	if err != nil {
		return sandbox.FileListing{}, err
	}
	return h.box.ListFiles(ctx, sandbox.FileList{Path: p, Depth: max(depth, 1), MaxEntries: maxListEntries})
}

// LookFile reads like ReadFile (in the same budget; call the answer's Release once written);
// see LookFiles.
func (s *Session) LookFile(ctx context.Context, p string, offset, length int64) (sandbox.FileContent, error) {
	h, err := s.active()
	if err != nil {
		return sandbox.FileContent{}, err
	}
	return s.r.read(ctx, h, s.Agent(), sandbox.FileRead{Path: p, Offset: offset, Length: length, MaxBytes: MaxReadBytes})
}

// WatchDir watches the session's directory spec as watcher id, with inotify in its box (see
// sandbox.Workspace.WatchDir): sink gets the changes as they happen, from one goroutine,
// until stop; when the box ends first (the session ended or hibernated), a last call with
// end set. A paused session is resumed when it was created with auto_resume, else the answer
// is a *SessionPausedError. Errors: the session's state, or the box's (invalid path, not
// found, the box's watcher cap).
func (s *Session) WatchDir(ctx context.Context, id string, spec sandbox.WatchSpec, sink func(events []sandbox.WatchEvent, end error)) (stop func(), err error) {
	b, err := s.box(ctx)
	if err != nil {
		return nil, err
	}
	return b.WatchDir(ctx, id, spec, sink)
}
