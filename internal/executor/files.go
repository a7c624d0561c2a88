package executor

// A run's files: the input files written into its working directory before its code starts,
// and the output files collected from there once every process of the run is dead.
//
// Both work beneath a descriptor of the working directory, one path component at a time with
// O_NOFOLLOW: a link the program left is never followed, and nothing outside the directory is
// ever opened. Output files are read only after the run's uid has no process left (the
// executor kills and waits for them first), and everything decided about a file (its type,
// its number of names, its size) is decided on the descriptor that is read, not on its path:
// a file swapped for a link after the listing is found out when it is opened.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"path"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

const (
	// maxScanEntries caps the directory entries the collector looks at in a run's working
	// directory (files, directories, links: all count); past it the scan stops and the
	// result says so (FilesTruncated).
	maxScanEntries = 10_000
	// maxScanDepth caps how deep the collector descends into directories.
	maxScanDepth = 32
	// maxOutputFileBytes caps one output file when its limit is 0 (none): its bytes, base64
	// in a KindFile frame, must fit in one frame.
	maxOutputFileBytes = protocol.MaxFrame / 2
)

// The flags of the collector's and the writer's opens. O_NONBLOCK and O_NOCTTY: a FIFO or a
// terminal swapped in for a file neither blocks the open nor becomes anything's terminal.
const (
	dirFlags  = syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC | syscall.O_NOCTTY
	readFlags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC | syscall.O_NOCTTY | syscall.O_NONBLOCK
)

// writeInputFiles writes files into dir, the run's fresh working directory (owned by uid; the
// run's program is waiting for its code and has touched nothing). Parent directories are
// made as needed. Every file is created new (O_EXCL) beneath dir's descriptor, one component
// at a time without following links, owned by uid and gid uid, with mode 0644 (directories
// 0755). An error names the file and what failed.
func writeInputFiles(dir string, uid int, files []sandbox.InputFile) error {
	if len(files) == 0 {
		return nil
	}
	root, err := openRetry(dir, dirFlags, 0)
	if err != nil {
		return fmt.Errorf("opening the run's directory %s: %w", dir, err)
	}
	defer syscall.Close(root)
	for _, f := range files {
		if err := writeInputFile(root, uid, f); err != nil {
			return fmt.Errorf("writing input file %q: %w", f.Name, err)
		}
	}
	return nil
}

func writeInputFile(root, uid int, f sandbox.InputFile) error {
	if err := sandbox.CheckFileName(f.Name); err != nil {
		return err
	}
	parts := strings.Split(f.Name, "/")
	dirfd, err := mkdirsBeneath(root, uid, parts[:len(parts)-1])
	if err != nil {
		return err
	}
	if dirfd != root {
		defer syscall.Close(dirfd)
	}
	fd, err := openatRetry(dirfd, parts[len(parts)-1], syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0o644)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, uid, uid); err != nil {
		return fmt.Errorf("giving it to uid %d: %w", uid, err)
	}
	if err := syscall.Fchmod(fd, 0o644); err != nil {
		return err
	}
	for data := f.Content; len(data) > 0; {
		n, err := syscall.Write(fd, data)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return err
		}
		data = data[n:]
	}
	return nil
}

// mkdirsBeneath opens the directory root/parts..., making each missing component (owned by
// uid, mode 0755) without following links. It returns root itself for no parts; any other
// descriptor is the caller's to close.
func mkdirsBeneath(root, uid int, parts []string) (int, error) {
	fd := root
	for _, part := range parts {
		err := syscall.Mkdirat(fd, part, 0o755)
		made := err == nil
		if err != nil && !errors.Is(err, syscall.EEXIST) {
			closeUnlessRoot(fd, root)
			return -1, fmt.Errorf("making directory %q: %w", part, err)
		}
		next, err := openDirAt(fd, part)
		closeUnlessRoot(fd, root)
		if err != nil {
			return -1, fmt.Errorf("opening directory %q: %w", part, err)
		}
		fd = next
		if made {
			if err := syscall.Fchown(fd, uid, uid); err != nil {
				syscall.Close(fd)
				return -1, fmt.Errorf("giving directory %q to uid %d: %w", part, uid, err)
			}
			if err := syscall.Fchmod(fd, 0o755); err != nil {
				syscall.Close(fd)
				return -1, err
			}
		}
	}
	return fd, nil
}

// openDirAt opens the directory name of dirfd for reading without following a symbolic link.
// O_NOFOLLOW alone is not enough everywhere: gVisor's openat follows a link despite
// O_NOFOLLOW when O_DIRECTORY is set (a link to /tmp opened /tmp), so the entry is looked at
// first with O_PATH|O_NOFOLLOW (which gVisor honours), and the directory opened must be that
// very inode: a link swapped in between the two is refused (ELOOP) too.
func openDirAt(dirfd int, name string) (int, error) {
	pfd, err := openatRetry(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC)
	if err != nil {
		return -1, err
	}
	var want syscall.Stat_t
	err = syscall.Fstat(pfd, &want)
	syscall.Close(pfd)
	if err != nil {
		return -1, err
	}
	switch want.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
	case syscall.S_IFLNK:
		return -1, syscall.ELOOP
	default:
		return -1, syscall.ENOTDIR
	}
	fd, err := openatRetry(dirfd, name, dirFlags)
	if err != nil {
		return -1, err
	}
	var got syscall.Stat_t
	if err := syscall.Fstat(fd, &got); err != nil || got.Dev != want.Dev || got.Ino != want.Ino {
		syscall.Close(fd)
		return -1, syscall.ELOOP
	}
	return fd, nil
}

func closeUnlessRoot(fd, root int) {
	if fd != root {
		syscall.Close(fd)
	}
}

func openRetry(path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := syscall.Open(path, flags, mode)
		if !errors.Is(err, syscall.EINTR) {
			return fd, err
		}
	}
}

func openatRetry(dirfd int, name string, flags int, mode ...uint32) (int, error) {
	var m uint32
	if len(mode) > 0 {
		m = mode[0]
	}
	for {
		fd, err := syscall.Openat(dirfd, name, flags, m)
		if !errors.Is(err, syscall.EINTR) {
			return fd, err
		}
	}
}

// collection is what the collector found: the files it sent (in name order), the entries it
// skipped (in name order, at most sandbox.MaxSkippedFiles) and whether more were left out.
type collection struct {
	files     []sandbox.File
	skipped   []sandbox.SkippedFile
	truncated bool
}

// collector walks a run's working directory for its output files.
type collector struct {
	root   int               // descriptor of the working directory
	inputs map[string][]byte // the run's input files, by name
	before *snapshot         // what was there before a session's call (nil: a run's collection)

	maxFiles                 int
	maxFileBytes, maxAllSize int64

	scanned    int      // entries looked at
	candidates []string // regular files (by their directory entry), by path
	skipped    []sandbox.SkippedFile
	truncated  bool
}

// collectOutputFiles finds the output files in dir, a run's working directory whose processes
// are all dead: every regular file with one name (not main.py, not an input file left
// byte-identical) within lim's caps (OutputFiles, OutputFileBytes, OutputFilesBytes), taken
// in name order. send receives each file with its bytes, in name order, as it is read.
// Anything else found is named in the skipped list with the reason: links, hard links,
// FIFOs, sockets, devices, files over a cap, names that CheckFileName refuses, directories too
// deep; the scan stops after maxScanEntries entries. An error means the directory itself
// could not be read.
func collectOutputFiles(dir string, inputs []sandbox.InputFile, lim sandbox.Limits, send func(sandbox.File, []byte)) (collection, error) {
	return collectFiles(dir, inputs, lim, nil, send)
}

// collectFiles is collectOutputFiles that also leaves out what before held unchanged (a
// session's files that its call did not create or change): the files whose stamp is the
// same, and the entries skipped before for the same reason (a link or FIFO made by an earlier
// command was named skipped by every later call; a trial, 2 December 2026).
func collectFiles(dir string, inputs []sandbox.InputFile, lim sandbox.Limits, before *snapshot, send func(sandbox.File, []byte)) (collection, error) {
	if lim.OutputFiles <= 0 {
		return collection{}, nil
	}
	root, err := openRetry(dir, dirFlags, 0)
	if err != nil {
		return collection{}, fmt.Errorf("opening the run's directory %s: %w", dir, err)
	}
	defer syscall.Close(root)
	c := &collector{root: root, inputs: map[string][]byte{}, before: before, maxFiles: lim.OutputFiles,
		maxFileBytes: lim.OutputFileBytes, maxAllSize: lim.OutputFilesBytes}
	if c.maxFileBytes <= 0 || c.maxFileBytes > maxOutputFileBytes {
		c.maxFileBytes = maxOutputFileBytes
	}
	for _, f := range inputs {
		c.inputs[f.Name] = f.Content
	}
	if err := c.scan(root, "", 0); err != nil {
		return collection{}, err
	}
	slices.Sort(c.candidates)
	var out collection
	var total int64
	for _, name := range c.candidates {
		if name == sandbox.CodeFileName { // the program's code, as the bootstrap wrote it
			continue
		}
		if len(out.files) >= c.maxFiles {
			c.skip(name, fmt.Sprintf("past the cap of %d output files", c.maxFiles))
			continue
		}
		f, content, ok := c.read(name, total)
		if !ok {
			continue
		}
		total += f.SizeBytes
		send(f, content)
		out.files = append(out.files, f)
	}
	if before != nil {
		c.skipped = slices.DeleteFunc(c.skipped, func(s sandbox.SkippedFile) bool { return before.skipped[s] })
	}
	slices.SortStableFunc(c.skipped, func(a, b sandbox.SkippedFile) int { return strings.Compare(a.Name, b.Name) })
	if len(c.skipped) > sandbox.MaxSkippedFiles {
		c.skipped, c.truncated = c.skipped[:sandbox.MaxSkippedFiles], true
	}
	out.skipped, out.truncated = c.skipped, c.truncated
	return out, nil
}

// skip records that the entry name was not collected, and why.
func (c *collector) skip(name, reason string) {
	c.skipped = append(c.skipped, sandbox.SkippedFile{Name: displayName(name), Reason: reason})
}

// displayName is name as it may be shown: invalid UTF-8 and control characters replaced
// with U+FFFD, at most sandbox.MaxFileNameBytes bytes.
func displayName(name string) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(name, "\uFFFD"))
	for len(name) > sandbox.MaxFileNameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}

// scan lists the directory dirfd (whose path is prefix, "" for the working directory) at
// depth, recording regular files as candidates and every other entry as skipped, and
// descends into its directories.
func (c *collector) scan(dirfd int, prefix string, depth int) error {
	entries, complete, err := readDir(dirfd, maxScanEntries-c.scanned)
	if err != nil {
		if prefix == "" {
			return fmt.Errorf("listing the run's directory: %w", err)
		}
		c.skip(prefix, fmt.Sprintf("directory that could not be listed (%v), not scanned", err))
		return nil
	}
	c.scanned += len(entries)
	if !complete {
		c.truncated = true
		where := prefix
		if where == "" {
			where = "."
		}
		c.skip(where, fmt.Sprintf("the scan stopped at its cap of %d directory entries: the rest of this directory was not looked at", maxScanEntries))
	}
	slices.SortFunc(entries, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	for _, e := range entries {
		name := path.Join(prefix, e.name)
		typ := e.typ
		if typ == dtUnknown {
			mode, err := lstatat(dirfd, e.name)
			if err != nil {
				c.skip(name, fmt.Sprintf("could not be looked at: %v", err))
				continue
			}
			typ = modeType(mode)
		}
		if typ != dtDir && typ != dtReg {
			c.skip(name, typeReason(typ))
			continue
		}
		if err := sandbox.CheckFileName(name); err != nil {
			c.skip(name, "its name cannot name an output file: "+err.Error())
			continue
		}
		if typ == dtReg {
			c.candidates = append(c.candidates, name)
			continue
		}
		if depth+1 >= maxScanDepth {
			c.skip(name, fmt.Sprintf("directory nested more than %d levels deep, not scanned", maxScanDepth))
			continue
		}
		if c.scanned >= maxScanEntries {
			c.truncated = true
			c.skip(name, fmt.Sprintf("directory not scanned: the scan had reached its cap of %d directory entries", maxScanEntries))
			continue
		}
		sub, err := openDirAt(dirfd, e.name)
		if err != nil {
			c.skip(name, fmt.Sprintf("directory that could not be opened (%v), not scanned", err))
			continue
		}
		err = c.scan(sub, name, depth+1)
		syscall.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// read opens the candidate name beneath the working directory and reads it, when it is an
// output file that fits the caps (total bytes are already taken); ok is false when it was
// skipped (and recorded so) or is an input file left as it was.
func (c *collector) read(name string, total int64) (f sandbox.File, content []byte, ok bool) {
	fd, err := openBeneath(c.root, name)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
			c.skip(name, "symbolic link, not followed (it replaced a file or directory during the scan)")
		} else {
			c.skip(name, fmt.Sprintf("could not be opened: %v", err))
		}
		return f, nil, false
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		c.skip(name, fmt.Sprintf("could not be looked at: %v", err))
		return f, nil, false
	}
	if typ := modeType(st.Mode); typ != dtReg {
		c.skip(name, typeReason(typ))
		return f, nil, false
	}
	if old, ok := c.before.stamp(name); ok && old == stampOf(&st) {
		return f, nil, false // a session's file that this call did not touch
	}
	if st.Nlink > 1 {
		c.skip(name, fmt.Sprintf("hard link (the file has %d names), not read: its other names may be outside the run's directory", st.Nlink))
		return f, nil, false
	}
	size := st.Size
	// An input file of its old size is read to be compared even over the caps (it is at
	// most an input file's size); any other file over a cap is never read.
	input, isInput := c.inputs[name]
	maybeUnchanged := isInput && int64(len(input)) == size
	if reason := c.overCap(size, total); reason != "" && !maybeUnchanged {
		c.skip(name, reason)
		return f, nil, false
	}
	content, err = readAll(fd, size)
	if err != nil {
		c.skip(name, fmt.Sprintf("could not be read: %v", err))
		return f, nil, false
	}
	if maybeUnchanged && bytes.Equal(content, input) {
		return f, nil, false // an input file left as it was: not an output
	}
	if reason := c.overCap(size, total); reason != "" {
		c.skip(name, reason)
		return f, nil, false
	}
	sum := sha256.Sum256(content)
	return sandbox.File{Name: name, SizeBytes: size, MediaType: mediaType(name, content), SHA256: hex.EncodeToString(sum[:])}, content, true
}

// oPath is O_PATH (the same on every architecture sandpit is built for); the syscall package
// names it on some only.
const oPath = 0x200000

// lstatat returns the mode of the entry name of the directory dirfd, not following a link:
// fstat of an O_PATH descriptor, which opens nothing (the syscall package has no fstatat on
// every architecture).
func lstatat(dirfd int, name string) (uint32, error) {
	fd, err := openatRetry(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Mode, nil
}

// overCap says which cap a file of size bytes passes when total bytes are already taken, or
// "" when it fits.
func (c *collector) overCap(size, total int64) string {
	switch {
	case size > c.maxFileBytes:
		return fmt.Sprintf("larger than the %d-byte cap on one output file (%d bytes), not read", c.maxFileBytes, size)
	case c.maxAllSize > 0 && total+size > c.maxAllSize:
		return fmt.Sprintf("its %d bytes would pass the %d-byte cap on all output files together, not read", size, c.maxAllSize)
	}
	return ""
}

// openBeneath opens the regular file at name (a path with "/" between parts) beneath the
// directory root for reading, one component at a time, following no link.
func openBeneath(root int, name string) (int, error) {
	parts := strings.Split(name, "/")
	fd := root
	for _, part := range parts[:len(parts)-1] {
		next, err := openDirAt(fd, part)
		closeUnlessRoot(fd, root)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	file, err := openatRetry(fd, parts[len(parts)-1], readFlags)
	closeUnlessRoot(fd, root)
	return file, err
}

// readAll reads the file at fd, of size bytes by its fstat; a file of another size by the
// time it is read is an error.
func readAll(fd int, size int64) ([]byte, error) {
	buf, err := readFull(fd, make([]byte, size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) != size {
		return nil, fmt.Errorf("it changed while being read (%d bytes, %d read)", size, len(buf))
	}
	return buf, nil
}

// Directory entry types (d_type of getdents64).
const (
	dtUnknown = 0
	dtFIFO    = 1
	dtChr     = 2
	dtDir     = 4
	dtBlk     = 6
	dtReg     = 8
	dtLnk     = 10
	dtSock    = 12
)

// modeType is the directory entry type of a stat mode.
func modeType(mode uint32) uint8 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return dtReg
	case syscall.S_IFDIR:
		return dtDir
	case syscall.S_IFLNK:
		return dtLnk
	case syscall.S_IFIFO:
		return dtFIFO
	case syscall.S_IFSOCK:
		return dtSock
	case syscall.S_IFCHR:
		return dtChr
	case syscall.S_IFBLK:
		return dtBlk
	}
	return dtUnknown
}

// typeReason says why an entry of type typ (not a regular file or directory) is skipped.
func typeReason(typ uint8) string {
	switch typ {
	case dtLnk:
		return "symbolic link, not followed"
	case dtFIFO:
		return "named pipe (FIFO), not read"
	case dtSock:
		return "socket, not read"
	case dtChr, dtBlk:
		return "device, not read"
	}
	return "not a regular file, not read"
}

type dirent struct {
	name string
	typ  uint8
}

// readDir lists the directory at fd: at most max entries ("." and ".." left out), and whether
// that was all of them.
func readDir(fd, max int) ([]dirent, bool, error) {
	var entries []dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.Getdents(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n <= 0 {
			return entries, true, nil
		}
		// struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, false, errors.New("a malformed directory entry")
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				if len(entries) >= max {
					return entries, false, nil
				}
				entries = append(entries, dirent{name: s, typ: b[18]})
			}
			b = b[reclen:]
		}
	}
}

// mediaTypes are the media types of the extensions an analysis writes most, so that a file's
// type does not depend on the box's /etc/mime.types.
var mediaTypes = map[string]string{
	".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".log": "text/plain",
	".md": "text/markdown", ".html": "text/html", ".htm": "text/html", ".css": "text/css",
	".js": "text/javascript", ".py": "text/x-python", ".xml": "application/xml",
	".json": "application/json", ".geojson": "application/geo+json", ".jsonl": "application/jsonl",
	".ndjson": "application/x-ndjson", ".yaml": "application/yaml", ".yml": "application/yaml",
	".toml": "application/toml", ".svg": "image/svg+xml",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
	".webp": "image/webp", ".bmp": "image/bmp", ".tif": "image/tiff", ".tiff": "image/tiff",
	".pdf": "application/pdf", ".zip": "application/zip", ".gz": "application/gzip",
	".tar": "application/x-tar", ".parquet": "application/vnd.apache.parquet",
	".wav": "audio/wav", ".mp3": "audio/mpeg", ".mp4": "video/mp4",
	".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}

// magic are the first bytes of the formats recognised without an extension.
var magic = []struct {
	prefix, mediaType string
}{
	{"\x89PNG\r\n\x1a\n", "image/png"},
	{"\xff\xd8\xff", "image/jpeg"},
	{"GIF87a", "image/gif"},
	{"GIF89a", "image/gif"},
	{"%PDF-", "application/pdf"},
	{"PK\x03\x04", "application/zip"},
	{"\x1f\x8b", "application/gzip"},
}

// mediaType is the media type of the file name with content: from its extension (the table
// above, then the mime package's), else from its first bytes; text in UTF-8 says its
// charset. Unknown bytes are application/octet-stream.
func mediaType(name string, content []byte) string {
	ext := strings.ToLower(path.Ext(name))
	t := mediaTypes[ext]
	if t == "" && ext != "" {
		t, _, _ = strings.Cut(mime.TypeByExtension(ext), ";")
	}
	if t == "" && bytes.HasPrefix(content, []byte("RIFF")) && len(content) >= 12 && string(content[8:12]) == "WEBP" {
		t = "image/webp"
	}
	for _, m := range magic {
		if t == "" && bytes.HasPrefix(content, []byte(m.prefix)) {
			t = m.mediaType
		}
	}
	text := utf8.Valid(content) && bytes.IndexByte(content, 0) < 0
	if t == "" && text {
		t = "text/plain"
	}
	switch {
	case t == "":
		return "application/octet-stream"
	case strings.HasPrefix(t, "text/") && text:
		return t + "; charset=utf-8"
	}
	return t
}

// stamp is what says that a file was not changed: the same inode, size, and modification
// and change times.
type stamp struct {
	ino          uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(st *syscall.Stat_t) stamp {
	return stamp{ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// snapshot is what a session's working directory held before a call, for collectFiles: the
// stamps of its regular files, and the entries a collection skips, with why.
type snapshot struct {
	stamps  map[string]stamp
	skipped map[sandbox.SkippedFile]bool
}

// stamp returns name's stamp before the call (false: none, or no snapshot).
func (s *snapshot) stamp(name string) (stamp, bool) {
	if s == nil {
		return stamp{}, false
	}
	st, ok := s.stamps[name]
	return st, ok
}

// stampFiles returns a snapshot of dir (a session's working directory), found as
// collectOutputFiles finds its files (beneath dir, never through a link, up to its caps). A
// directory that cannot be read gives an empty one: everything then counts as changed.
func stampFiles(dir string) *snapshot {
	snap := &snapshot{stamps: map[string]stamp{}, skipped: map[sandbox.SkippedFile]bool{}}
	root, err := openRetry(dir, dirFlags, 0)
	if err != nil {
		return snap
	}
	defer syscall.Close(root)
	c := &collector{root: root}
	if c.scan(root, "", 0) != nil {
		return snap
	}
	for _, s := range c.skipped {
		snap.skipped[s] = true
	}
	for _, name := range c.candidates {
		fd, err := openBeneath(root, name)
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) == nil {
			snap.stamps[name] = stampOf(&st)
		}
		syscall.Close(fd)
	}
	return snap
}
