package executor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's files by path (KindFile* messages). Every operation runs on a thread that has
// become the session's uid and gid (see asUserThread): it can reach only what the session's own
// programs can, and what it writes is the session's, counted against its disk (the home's
// tmpfs). Paths are the session's view (sandbox.SessionHome); each is resolved beneath the
// home one component at a time with O_NOFOLLOW from a descriptor of the home, so no symbolic
// link is ever followed, also one swapped in between a check and the use: the open of that
// component fails instead. FIFOs, sockets and devices are refused by name.

// fileError is a file operation's failure, with the class its transport answers with.
type fileError struct {
	class error
	msg   string
}

func (e *fileError) Error() string { return e.msg }

func fileErr(class error, format string, args ...any) error {
	return &fileError{class: class, msg: fmt.Sprintf(format, args...)}
}

// writeTempPrefix begins the name of the temporary file a write goes to before it is renamed
// into place; watchers do not report such files.
const writeTempPrefix = ".sandpit-write-"

// maxListEntries bounds a listing whose request asks for more (or for none in particular).
const maxListEntries = 100_000

// wsPath is a session path resolved beneath the home: its parts (none for the home itself)
// and its session view.
type wsPath struct {
	parts []string
	view  string
}

func (p wsPath) name() string { return p.parts[len(p.parts)-1] }

// resolvePath maps p (absolute under the home, or relative to it) to its parts. A path that
// leaves the home ("..", another absolute path, /proc/self/root ...) is refused.
func resolvePath(field, p string) (wsPath, error) {
	if p == "" {
		return wsPath{}, fileErr(errclass.Invalid, "%s is empty: give a path under %s (relative paths start there)", field, sandbox.SessionHome)
	}
	if strings.ContainsRune(p, 0) {
		return wsPath{}, fileErr(errclass.Invalid, "%s %q holds a NUL byte", field, p)
	}
	abs := p
	if !strings.HasPrefix(abs, "/") {
		abs = sandbox.SessionHome + "/" + abs
	}
	clean := path.Clean(abs)
	if clean != sandbox.SessionHome && !strings.HasPrefix(clean, sandbox.SessionHome+"/") {
		return wsPath{}, fileErr(errclass.Invalid, "%s %q is outside the session's home: every path must lie under %s (the session's only writable directory; relative paths start there)",
			field, p, sandbox.SessionHome)
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(clean, sandbox.SessionHome), "/")
	var parts []string
	if rest != "" {
		parts = strings.Split(rest, "/")
	}
	return wsPath{parts: parts, view: clean}, nil
}

// errnoError maps a system error on view to a fileError.
func errnoError(view, what string, err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s %s: %w", what, view, err)
	}
	switch errno {
	case syscall.ENOENT:
		return fileErr(errclass.NotFound, "%s does not exist", view)
	case syscall.EISDIR:
		return fileErr(errclass.Conflict, "%s is a directory; give the path of a file", view)
	case syscall.ENOTDIR:
		return fileErr(errclass.Conflict, "a part of %s is not a directory", view)
	case syscall.EEXIST:
		return fileErr(errclass.Conflict, "%s exists already", view)
	case syscall.ENOTEMPTY:
		return fileErr(errclass.Conflict, "%s is a directory that is not empty; set recursive to remove it with its contents", view)
	case syscall.ELOOP:
		return fileErr(errclass.Invalid, "%s is (or passes through) a symbolic link; "+noLinks, view)
	case syscall.ENOSPC, syscall.EDQUOT:
		return fileErr(errclass.TooLarge, "the session's disk is full while %s %s (its cap is run_dir_bytes in the configuration); remove files first", what, view)
	case syscall.EACCES, syscall.EPERM:
		return fileErr(errclass.Invalid, "%s %s: permission denied (the session's own programs cannot either)", what, view)
	case syscall.ENXIO, syscall.ENODEV:
		return fileErr(errclass.Invalid, "%s is a FIFO, socket or device; sandpit reads and writes regular files only", view)
	}
	return fmt.Errorf("%s %s: %w", what, view, err)
}

// asUserThread runs fn on a thread that has become uid and gid (with no supplementary groups), and
// only that thread, which is never used again (see asUID). uid is only its effective uid (the
// files' owner and the checks of access): its real and saved uids are killerUID, as asUID's,
// since a process of uid may signal or trace a thread whose real or saved uid is uid, and a
// session's process that stopped it would stop the executor (H42). Checks of access in fn
// must use the effective ids (unix.AT_EACCESS), not access(2)'s real ones.
func asUserThread(uid int, fn func() error) error { return onThreadAs(uid, true, fn) }

// ws is one file operation's view of the session's home.
type ws struct {
	home string // the home's path in the box
	root int    // a descriptor of it
}

// openDir opens the directory of parts beneath the home (the home itself for none), making
// missing ones when mkdirs is set; the descriptor is the caller's to close.
func (w *ws) openDir(view string, parts []string, mkdirs bool) (int, error) {
	fd, err := syscall.Dup(w.root)
	if err != nil {
		return -1, err
	}
	for i, part := range parts {
		if mkdirs {
			if err := syscall.Mkdirat(fd, part, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
				syscall.Close(fd)
				return -1, errnoError(sandbox.SessionHome+"/"+strings.Join(parts[:i+1], "/"), "making directory", err)
			}
		}
		next, err := openDirAt(fd, part)
		if err != nil {
			sub := sandbox.SessionHome + "/" + strings.Join(parts[:i+1], "/")
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
				if m, serr := lstatat(fd, part); serr == nil && m&syscall.S_IFMT == syscall.S_IFLNK {
					err = syscall.ELOOP
				}
			}
			syscall.Close(fd)
			if errors.Is(err, syscall.ENOENT) && sub != view {
				return -1, fileErr(errclass.NotFound, "%s does not exist (its directory %s does not)", view, sub)
			}
			return -1, errnoError(sub, "opening", err)
		}
		syscall.Close(fd)
		fd = next
	}
	return fd, nil
}

// entry describes the entry name of directory dirfd (not following a link).
func entry(dirfd int, name, view string) (sandbox.FileEntry, syscall.Stat_t, error) {
	var st syscall.Stat_t
	fd, err := openatRetry(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC)
	if err != nil {
		return sandbox.FileEntry{}, st, err
	}
	defer syscall.Close(fd)
	if err := syscall.Fstat(fd, &st); err != nil {
		return sandbox.FileEntry{}, st, err
	}
	e := entryOf(&st, name, view)
	if e.Type == "symlink" {
		e.Target = readlinkat(dirfd, name)
	}
	return e, st, nil
}

func entryOf(st *syscall.Stat_t, name, view string) sandbox.FileEntry {
	e := sandbox.FileEntry{Path: view, Name: name, SizeBytes: st.Size, Mode: fmt.Sprintf("%04o", st.Mode&0o7777),
		ModifiedAt: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		e.Type = "file"
	case syscall.S_IFDIR:
		e.Type = "dir"
	case syscall.S_IFLNK:
		e.Type = "symlink"
	default:
		e.Type = "other"
	}
	if name == "" {
		e.Name = path.Base(view)
	}
	return e
}

func readlinkat(dirfd int, name string) string {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return ""
	}
	buf := make([]byte, 4096)
	n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return ""
	}
	return string(buf[:n])
}

// kindReason names what a non-regular, non-directory file is, for a refusal.
// noLinks is the advice of an error for a path that is, or passes through, a symbolic link.
const noLinks = "sandpit follows no link in a session's files: give the link's target instead, when it is inside the session's home"

func kindReason(view string, mode uint32) error {
	what := "a special file"
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		what = "a FIFO (named pipe)"
	case syscall.S_IFSOCK:
		what = "a socket"
	case syscall.S_IFCHR, syscall.S_IFBLK:
		what = "a device"
	case syscall.S_IFLNK:
		return fileErr(errclass.Invalid, "%s is a symbolic link; "+noLinks, view)
	case syscall.S_IFDIR:
		return fileErr(errclass.Conflict, "%s is a directory; give the path of a file", view)
	}
	return fileErr(errclass.Invalid, "%s is %s; sandpit reads and writes regular files only", view, what)
}

// fileOp serves one KindFile* request of the session (slot's home) and sends its reply.
func (e *Executor) fileOp(slot int, m *protocol.Message) {
	reply := &protocol.Message{Kind: protocol.KindFileReply, ID: m.ID}
	var out protocol.FileReply
	home, err := e.sessionHome(slot)
	if err == nil {
		err = asUserThread(e.cfg.UIDBase+slot, func() error {
			root, err := openRetry(home, dirFlags, 0)
			if err != nil {
				return fmt.Errorf("opening the session's home: %w", err)
			}
			defer syscall.Close(root)
			w := &ws{home: home, root: root}
			return w.do(m, &out)
		})
	}
	if err != nil {
		reply.Error = err.Error()
		if fe, ok := errors.AsType[*fileError](err); ok {
			reply.ErrorClass = fe.class.Error()
		}
	} else {
		reply.FileReply = &out
	}
	e.send(reply)
}

func (w *ws) do(m *protocol.Message, out *protocol.FileReply) error {
	switch {
	case m.FileRead != nil:
		return w.read(*m.FileRead, out)
	case m.FileWrite != nil:
		return w.write(*m.FileWrite, out)
	case m.FileList != nil:
		return w.list(*m.FileList, out)
	case m.FileStat != nil:
		p, err := resolvePath("path", m.FileStat.Path)
		if err != nil {
			return err
		}
		ent, err := w.stat(p)
		out.Entry = &ent
		return err
	case m.FileMkdir != nil:
		return w.mkdir(*m.FileMkdir, out)
	case m.FileRename != nil:
		return w.rename(*m.FileRename, out)
	case m.FileRemove != nil:
		return w.remove(*m.FileRemove)
	}
	return fmt.Errorf("a %s message without its request", m.Kind)
}

// stat describes p (the home itself for no parts).
func (w *ws) stat(p wsPath) (sandbox.FileEntry, error) {
	if len(p.parts) == 0 {
		var st syscall.Stat_t
		if err := syscall.Fstat(w.root, &st); err != nil {
			return sandbox.FileEntry{}, err
		}
		return entryOf(&st, "user", p.view), nil
	}
	dir, err := w.openDir(p.view, p.parts[:len(p.parts)-1], false)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	defer syscall.Close(dir)
	ent, _, err := entry(dir, p.name(), p.view)
	if err != nil {
		return sandbox.FileEntry{}, errnoError(p.view, "reading", err)
	}
	return ent, nil
}

func (w *ws) read(r sandbox.FileRead, out *protocol.FileReply) error {
	p, err := resolvePath("path", r.Path)
	if err != nil {
		return err
	}
	if len(p.parts) == 0 {
		return fileErr(errclass.Conflict, "%s is a directory; give the path of a file", p.view)
	}
	if r.Offset < 0 || r.Length < 0 {
		return fileErr(errclass.Invalid, "offset and length must not be negative")
	}
	dir, err := w.openDir(p.view, p.parts[:len(p.parts)-1], false)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	// O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
	fd, err := openatRetry(dir, p.name(), readFlags)
	if err != nil {
		if m, serr := lstatat(dir, p.name()); serr == nil && m&syscall.S_IFMT != syscall.S_IFREG {
			return kindReason(p.view, m)
		}
		return errnoError(p.view, "reading", err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return kindReason(p.view, st.Mode)
	}
	ent := entryOf(&st, p.name(), p.view)
	out.Entry = &ent
	n := st.Size - r.Offset
	if n < 0 {
		n = 0
	}
	if r.Length > 0 && r.Length < n {
		n = r.Length
	}
	if r.MaxBytes > 0 && n > r.MaxBytes {
		return fileErr(errclass.TooLarge, "%s holds %d bytes from offset %d, more than the %d bytes one read may return; read it in ranges (offset and length)",
			p.view, n, r.Offset, r.MaxBytes)
	}
	buf := make([]byte, n)
	got := 0
	for got < len(buf) {
		k, err := syscall.Pread(fd, buf[got:], r.Offset+int64(got))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return errnoError(p.view, "reading", err)
		}
		if k == 0 {
			break
		}
		got += k
	}
	out.Content = buf[:got]
	return nil
}

// write writes the file through a temporary file in its directory renamed over it: a write
// that fails (the disk's cap) leaves the old file as it was and nothing else, and a link put
// at the name meanwhile is replaced, never written through.
func (w *ws) write(r sandbox.FileWrite, out *protocol.FileReply) error {
	p, err := resolvePath("path", r.Path)
	if err != nil {
		return err
	}
	if len(p.parts) == 0 {
		return fileErr(errclass.Conflict, "%s is a directory; give the path of a file", p.view)
	}
	dir, err := w.openDir(p.view, p.parts[:len(p.parts)-1], r.Parents)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	if m, serr := lstatat(dir, p.name()); serr == nil && m&syscall.S_IFMT != syscall.S_IFREG {
		return kindReason(p.view, m)
	}
	if r.Append {
		fd, err := openatRetry(dir, p.name(), syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0o644)
		if err != nil {
			return errnoError(p.view, "writing", err)
		}
		defer syscall.Close(fd)
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return kindReason(p.view, st.Mode)
		}
		if err := writeAll(fd, r.Content); err != nil {
			return errnoError(p.view, "writing", err)
		}
	} else {
		var suffix [6]byte
		_, _ = rand.Read(suffix[:])
		tmp := writeTempPrefix + hex.EncodeToString(suffix[:])
		fd, err := openatRetry(dir, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0o644)
		if err != nil {
			return errnoError(p.view, "writing", err)
		}
		werr := writeAll(fd, r.Content)
		syscall.Close(fd)
		if werr == nil {
			werr = syscall.Renameat(dir, tmp, dir, p.name())
		}
		if werr != nil {
			_ = syscall.Unlinkat(dir, tmp)
			return errnoError(p.view, "writing", werr)
		}
	}
	ent, _, err := entry(dir, p.name(), p.view)
	if err != nil {
		return errnoError(p.view, "writing", err)
	}
	out.Entry = &ent
	return nil
}

func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (w *ws) list(r sandbox.FileList, out *protocol.FileReply) error {
	p, err := resolvePath("path", r.Path)
	if err != nil {
		return err
	}
	depth := r.Depth
	if depth <= 0 {
		depth = 1
	}
	limit := r.MaxEntries
	if limit <= 0 || limit > maxListEntries {
		limit = maxListEntries
	}
	var fd int
	if len(p.parts) == 0 {
		if fd, err = syscall.Dup(w.root); err != nil {
			return err
		}
	} else {
		dir, err := w.openDir(p.view, p.parts[:len(p.parts)-1], false)
		if err != nil {
			return err
		}
		fd, err = openDirAt(dir, p.name())
		if err != nil {
			m, serr := lstatat(dir, p.name())
			syscall.Close(dir)
			if serr == nil && m&syscall.S_IFMT == syscall.S_IFLNK {
				return kindReason(p.view, m)
			}
			if serr == nil && m&syscall.S_IFMT != syscall.S_IFDIR {
				return fileErr(errclass.Conflict, "%s is not a directory; list a directory (stat describes one file)", p.view)
			}
			return errnoError(p.view, "listing", err)
		}
		syscall.Close(dir)
	}
	listing := &sandbox.FileListing{Entries: []sandbox.FileEntry{}}
	err = listDir(fd, p.view, depth, limit, listing)
	syscall.Close(fd)
	if err != nil {
		return errnoError(p.view, "listing", err)
	}
	out.Listing = listing
	return nil
}

// listDir appends the entries of the directory fd (view) to l, depth levels down, until l
// holds limit entries.
func listDir(fd int, view string, depth, limit int, l *sandbox.FileListing) error {
	ents, complete, err := readDir(fd, limit-len(l.Entries)+1)
	if err != nil {
		return err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	for _, d := range ents {
		if len(l.Entries) >= limit {
			l.Truncated = true
			return nil
		}
		sub := view + "/" + d.name
		ent, _, err := entry(fd, d.name, sub)
		if err != nil {
			continue // gone meanwhile
		}
		l.Entries = append(l.Entries, ent)
		if ent.Type == "dir" && depth > 1 {
			child, err := openDirAt(fd, d.name)
			if err != nil {
				continue
			}
			err = listDir(child, sub, depth-1, limit, l)
			syscall.Close(child)
			if err != nil {
				return err
			}
		}
	}
	if !complete {
		l.Truncated = true
	}
	return nil
}

func (w *ws) mkdir(r sandbox.FileMkdir, out *protocol.FileReply) error {
	p, err := resolvePath("path", r.Path)
	if err != nil {
		return err
	}
	if len(p.parts) == 0 {
		if r.Parents {
			ent, err := w.stat(p)
			out.Entry = &ent
			return err
		}
		return fileErr(errclass.Conflict, "%s exists already", p.view)
	}
	dir, err := w.openDir(p.view, p.parts[:len(p.parts)-1], r.Parents)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	if err := syscall.Mkdirat(dir, p.name(), 0o755); err != nil {
		m, serr := lstatat(dir, p.name())
		if !(errors.Is(err, syscall.EEXIST) && r.Parents && serr == nil && m&syscall.S_IFMT == syscall.S_IFDIR) {
			if errors.Is(err, syscall.EEXIST) && serr == nil && m&syscall.S_IFMT != syscall.S_IFDIR {
				return fileErr(errclass.Conflict, "%s exists already and is not a directory", p.view)
			}
			return errnoError(p.view, "making directory", err)
		}
	}
	ent, _, err := entry(dir, p.name(), p.view)
	if err != nil {
		return errnoError(p.view, "making directory", err)
	}
	out.Entry = &ent
	return nil
}

// sysRenameat2 is renameat2's number (the syscall package lacks it).
var sysRenameat2 = map[string]uintptr{"amd64": 316, "arm64": 276, "386": 353, "arm": 382}[runtime.GOARCH]

// renameNoReplace is renameat2's flag that refuses to replace an existing target.
const renameNoReplace = 1

func (w *ws) rename(r sandbox.FileRename, out *protocol.FileReply) error {
	from, err := resolvePath("from", r.From)
	if err != nil {
		return err
	}
	to, err := resolvePath("to", r.To)
	if err != nil {
		return err
	}
	if len(from.parts) == 0 || len(to.parts) == 0 {
		return fileErr(errclass.Invalid, "the session's home %s itself cannot be renamed or replaced", sandbox.SessionHome)
	}
	if strings.HasPrefix(to.view+"/", from.view+"/") && to.view != from.view {
		return fileErr(errclass.Invalid, "%s cannot be moved into itself (%s)", from.view, to.view)
	}
	fdir, err := w.openDir(from.view, from.parts[:len(from.parts)-1], false)
	if err != nil {
		return err
	}
	defer syscall.Close(fdir)
	tdir, err := w.openDir(to.view, to.parts[:len(to.parts)-1], false)
	if err != nil {
		return err
	}
	defer syscall.Close(tdir)
	if _, err := lstatat(fdir, from.name()); err != nil {
		return errnoError(from.view, "renaming", err)
	}
	if r.Overwrite {
		err = syscall.Renameat(fdir, from.name(), tdir, to.name())
	} else {
		err = renameat2(fdir, from.name(), tdir, to.name(), renameNoReplace)
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
			if _, serr := lstatat(tdir, to.name()); serr == nil {
				err = syscall.EEXIST
			} else {
				err = syscall.Renameat(fdir, from.name(), tdir, to.name())
			}
		}
	}
	if errors.Is(err, syscall.EEXIST) {
		return fileErr(errclass.Conflict, "%s exists already; set overwrite to replace it", to.view)
	}
	if err != nil {
		return errnoError(to.view, "renaming "+from.view+" to", err)
	}
	ent, _, err := entry(tdir, to.name(), to.view)
	if err != nil {
		return errnoError(to.view, "renaming", err)
	}
	out.Entry = &ent
	return nil
}

func renameat2(olddir int, oldname string, newdir int, newname string, flags uint) error {
	o, err := syscall.BytePtrFromString(oldname)
	if err != nil {
		return err
	}
	n, err := syscall.BytePtrFromString(newname)
	if err != nil {
		return err
	}
	_, _, e := syscall.Syscall6(sysRenameat2, uintptr(olddir), uintptr(unsafe.Pointer(o)), uintptr(newdir), uintptr(unsafe.Pointer(n)), uintptr(flags), 0)
	if e != 0 {
		return e
	}
	return nil
}

// atRemoveDir is unlinkat's flag that removes a directory.
const atRemoveDir = 0x200

func (w *ws) remove(r sandbox.FileRemove) error {
	p, err := resolvePath("path", r.Path)
	if err != nil {
		return err
	}
	if len(p.parts) == 0 {
		return fileErr(errclass.Invalid, "the session's home %s itself cannot be removed; remove what is in it", sandbox.SessionHome)
	}
	dir, err := w.openDir(p.view, p.parts[:len(p.parts)-1], false)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	m, err := lstatat(dir, p.name())
	if err != nil {
		return errnoError(p.view, "removing", err)
	}
	if m&syscall.S_IFMT != syscall.S_IFDIR {
		return errnoError(p.view, "removing", syscall.Unlinkat(dir, p.name()))
	}
	if r.Recursive {
		return errnoError(p.view, "removing", removeAllAt(dir, p.name()))
	}
	if err := unlinkat(dir, p.name(), atRemoveDir); err != nil {
		return errnoError(p.view, "removing", err)
	}
	return nil
}

// removeAllAt removes the directory name of dirfd with everything in it, following no link.
func removeAllAt(dirfd int, name string) error {
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return err
	}
	for {
		ents, _, err := readDir(fd, 1024)
		if err != nil {
			syscall.Close(fd)
			return err
		}
		if len(ents) == 0 {
			break
		}
		for _, d := range ents {
			if err := unlinkat(fd, d.name, 0); errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EPERM) {
				if err := removeAllAt(fd, d.name); err != nil {
					syscall.Close(fd)
					return err
				}
			} else if err != nil && !errors.Is(err, syscall.ENOENT) {
				syscall.Close(fd)
				return err
			}
		}
		if _, err := syscall.Seek(fd, 0, 0); err != nil {
			syscall.Close(fd)
			return err
		}
	}
	syscall.Close(fd)
	return unlinkat(dirfd, name, atRemoveDir)
}

func unlinkat(dirfd int, name string, flags int) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, e := syscall.Syscall(syscall.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags))
	if e != 0 {
		return e
	}
	return nil
}
