package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Watching a directory in the box with inotify: the building block of a session's watchers
// (E2B's WatchDir and CreateWatcher), which see a change as soon as the kernel reports it
// rather than at the daemon's next listing.
//
// A dirWatch holds one inotify descriptor (close-on-exec, so no program of the session
// inherits it) with one watch per watched directory. Recursive watches add a watch for each
// subdirectory that appears, and report what a new subdirectory already holds by the time its
// watch is in place as created, so a file written at once into a new directory is not missed.
// Its resources are bounded: at most maxWatches directories, at most maxQueued events waiting
// for the reader. Past either bound the watcher says so with an overflow event (sandbox.WatchOverflow,
// Detail: what was lost) rather than dropping changes silently. Symbolic links are never
// followed: a link to a directory is an entry, not a directory to descend into.

const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// dirWatch is one watcher: an inotify descriptor and the directories it watches.
type dirWatch struct {
	root       string
	recursive  bool
	maxWatches int
	file       *os.File // the inotify descriptor, in Go's poller so Close ends a pending read
	fd         int
	// rootfd is root, opened (O_PATH) once: every subdirectory is reached from it one name at
	// a time, never following a link (see openRel).
	rootfd int

	events chan sandbox.WatchEvent
	done   chan struct{}

	mu     sync.Mutex
	byWD   map[int32]string // watch descriptor → directory relative to root ("" is root)
	byDir  map[string]int32
	lost   int  // events not queued since the last overflow event
	capped bool // a directory was left unwatched since the last overflow event

	tmpCookie uint32 // the rename of a file write's temporary file into place (reader only)
}

// newDirWatch watches root (an absolute path to a directory; it and, when recursive, every
// subdirectory up to sandbox.WatchDepth levels below, at most maxWatches directories) and
// queues at most maxQueued events for Events. Errors: root is not a directory, or inotify's
// limits are reached (the errno says which). Close releases everything.
func newDirWatch(root string, recursive bool, maxWatches, maxQueued int) (*dirWatch, error) {
	if maxWatches < 1 || maxQueued < 1 {
		return nil, fmt.Errorf("watch %s: maxWatches and maxQueued must be positive", root)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch %s: inotify_init1: %w", root, err)
	}
	file := os.NewFile(uintptr(fd), "inotify")
	// The root may be a descriptor's link (/proc/self/fd/N), which must be followed.
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		file.Close()
		if errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s is not a directory: watch a directory", root)
		}
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	w := &dirWatch{
		root: filepath.Clean(root), recursive: recursive, maxWatches: maxWatches,
		file: file, fd: fd, rootfd: rootfd,
		events: make(chan sandbox.WatchEvent, maxQueued), done: make(chan struct{}),
		byWD: map[int32]string{}, byDir: map[string]int32{},
	}
	if err := w.add(""); err != nil {
		w.file.Close()
		unix.Close(rootfd)
		return nil, err
	}
	if recursive {
		w.walk("", nil)
	}
	go w.read()
	return w, nil
}

// Events is the watcher's events, in the order the kernel reported them; it is closed when
// the watcher is closed.
func (w *dirWatch) Events() <-chan sandbox.WatchEvent { return w.events }

// Close stops the watcher and releases its descriptor and watches; Events is then closed.
func (w *dirWatch) Close() error {
	err := w.file.Close()
	<-w.done
	unix.Close(w.rootfd)
	return err
}

// openRel opens the directory rel (relative to root; "" is root) with flags, one name at a
// time from root's descriptor, never following a link (O_NOFOLLOW, O_DIRECTORY): a session
// that swaps a subdirectory for a link to a directory outside its home, between its creation
// and its watch, gets ENOTDIR, not a watch of what the link names. The caller closes it.
func (w *dirWatch) openRel(rel string, flags int) (int, error) {
	if rel == "" {
		return unix.Openat(w.rootfd, ".", flags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	names := strings.Split(rel, "/")
	cur := w.rootfd
	for i, name := range names {
		f := unix.O_PATH
		if i == len(names)-1 {
			f = flags
		}
		next, err := unix.Openat(cur, name, f|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != w.rootfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// add watches the directory rel (relative to root).
func (w *dirWatch) add(rel string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byDir[rel]; ok {
		return nil
	}
	if len(w.byDir) >= w.maxWatches {
		w.capped = true
		return errWatchCap
	}
	dir, err := w.openRel(rel, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	// Watched through its descriptor's link, which is followed: it names what openRel opened.
	wd, err := unix.InotifyAddWatch(w.fd, fmt.Sprintf("/proc/self/fd/%d", dir), uint32(watchMask)&^unix.IN_DONT_FOLLOW)
	if err != nil {
		if rel == "" {
			if errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("%s is not a directory: watch a directory", w.root)
			}
			return fmt.Errorf("watch %s: %w", w.root, err)
		}
		return err
	}
	w.byWD[int32(wd)] = rel
	w.byDir[rel] = int32(wd)
	return nil
}

var errWatchCap = errors.New("watch limit reached")

// walk watches the subdirectories of rel, depth first, and, when created is not nil, reports
// each entry found through it (entries of a directory that appeared after the watch began).
func (w *dirWatch) walk(rel string, created func(string)) {
	if strings.Count(rel, "/")+1 > sandbox.WatchDepth && rel != "" {
		return
	}
	dir, err := w.openRel(rel, unix.O_RDONLY)
	if err != nil {
		return // gone already (its removal is reported by its parent's watch), or a link
	}
	d := os.NewFile(uintptr(dir), filepath.Join(w.root, rel))
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return
	}
	for _, e := range entries {
		name := joinRel(rel, e.Name())
		if created != nil {
			created(name)
		}
		if e.Type()&fs.ModeDir == 0 || strings.Count(name, "/") >= sandbox.WatchDepth {
			continue
		}
		if err := w.add(name); err != nil {
			if errors.Is(err, errWatchCap) {
				w.flushOverflow()
				return
			}
			continue
		}
		w.walk(name, created)
	}
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// read turns the kernel's events into WatchEvents until the descriptor is closed.
func (w *dirWatch) read() {
	defer close(w.done)
	defer close(w.events)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			w.handle(raw.Wd, raw.Mask, raw.Cookie, strings.TrimRight(string(nameBytes), "\x00"))
		}
	}
}

func (w *dirWatch) handle(wd int32, mask, cookie uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.emit(sandbox.WatchEvent{Op: sandbox.WatchOverflow, Detail: "the kernel's event queue overflowed: changes were lost; list the directory again"})
		return
	}
	w.mu.Lock()
	dir, ok := w.byWD[wd]
	if mask&unix.IN_IGNORED != 0 && ok {
		delete(w.byWD, wd)
		delete(w.byDir, dir)
	}
	w.mu.Unlock()
	if !ok || mask&unix.IN_IGNORED != 0 {
		return
	}
	if strings.HasPrefix(name, writeTempPrefix) {
		// A file write's temporary file: the write shows as its target's create and write.
		if mask&unix.IN_MOVED_FROM != 0 {
			w.tmpCookie = cookie
		}
		return
	}
	rel := joinRel(dir, name)
	if mask&unix.IN_MOVED_TO != 0 && cookie != 0 && cookie == w.tmpCookie {
		w.tmpCookie = 0
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchCreate})
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchWrite})
		return
	}
	switch {
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		if dir == "" { // the watched directory itself went; its children reported their own
			w.emit(sandbox.WatchEvent{Name: "", Op: sandbox.WatchRemove})
		}
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchCreate})
		if w.recursive && mask&unix.IN_ISDIR != 0 && strings.Count(rel, "/") < sandbox.WatchDepth {
			if err := w.add(rel); err != nil {
				if errors.Is(err, errWatchCap) {
					w.flushOverflow()
				}
				return
			}
			w.walk(rel, func(n string) { w.emit(sandbox.WatchEvent{Name: n, Op: sandbox.WatchCreate}) })
		}
	case mask&unix.IN_MOVED_FROM != 0:
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchRename})
		w.forget(rel)
	case mask&unix.IN_DELETE != 0:
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchRemove})
	case mask&unix.IN_MODIFY != 0:
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchWrite})
	case mask&unix.IN_ATTRIB != 0:
		w.emit(sandbox.WatchEvent{Name: rel, Op: sandbox.WatchChmod})
	}
}

// forget drops the watches of a directory moved away (and those below it): its entries'
// names under root are no longer what the watch would report.
func (w *dirWatch) forget(rel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for dir, wd := range w.byDir {
		if dir == rel || strings.HasPrefix(dir, rel+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.byDir, dir)
			delete(w.byWD, wd)
		}
	}
}

// emit queues ev, or counts it lost when the reader is maxQueued events behind; the next
// event that fits is preceded by an overflow event saying how many were lost.
func (w *dirWatch) emit(ev sandbox.WatchEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost > 0 || w.capped {
		if !w.sendOverflowLocked() {
			w.lost++
			return
		}
	}
	select {
	case w.events <- ev:
	default:
		w.lost++
	}
}

// flushOverflow reports a reached watch cap now rather than with the next event.
func (w *dirWatch) flushOverflow() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sendOverflowLocked()
}

func (w *dirWatch) sendOverflowLocked() bool {
	var parts []string
	if w.lost > 0 {
		parts = append(parts, fmt.Sprintf("%d events were lost because they were not read in time", w.lost))
	}
	if w.capped {
		parts = append(parts, fmt.Sprintf("this watcher watches at most %d directories, so changes in further ones are not reported", w.maxWatches))
	}
	if len(parts) == 0 {
		return true
	}
	select {
	case w.events <- sandbox.WatchEvent{Op: sandbox.WatchOverflow, Detail: strings.Join(parts, "; ") + "; list the directory again"}:
		w.lost, w.capped = 0, false
		return true
	default:
		return false
	}
}

// maxSessionWatchers bounds a session's watchers in the box (the daemon caps them first).
const maxSessionWatchers = 16

// maxEventsPerMessage bounds the events one KindWatchEvents message carries.
const maxEventsPerMessage = 256

// watchers are a session's directory watchers, by watcher ID.
type watchers struct {
	mu      sync.Mutex
	byID    map[string]*dirWatch
	stopped bool
}

// watch serves a KindWatch: it watches m.Watch beneath slot's home, answers
// KindWatchStarted, then sends the watcher's events until KindUnwatch or the executor's end,
// and last a KindWatchEnded.
func (e *Executor) watch(slot int, m *protocol.Message) {
	fail := func(err error) {
		reply := &protocol.Message{Kind: protocol.KindWatchStarted, ID: m.ID, Error: err.Error()}
		if fe, ok := errors.AsType[*fileError](err); ok {
			reply.ErrorClass = fe.class.Error()
		}
		e.send(reply)
	}
	if m.Watch == nil {
		fail(errors.New("a watch message without its directory"))
		return
	}
	p, err := resolvePath("path", m.Watch.Path)
	if err != nil {
		fail(err)
		return
	}
	home, err := e.sessionHome(slot)
	if err != nil {
		fail(err)
		return
	}
	// The directory is opened as the session's user, one component at a time without
	// following links (see openDir); the watch is then of that directory, whatever its path
	// comes to name.
	dirfd := -1
	err = asUserThread(e.cfg.UIDBase+slot, func() error {
		root, err := openRetry(home, dirFlags, 0)
		if err != nil {
			return fmt.Errorf("opening the session's home: %w", err)
		}
		defer unix.Close(root)
		w := &ws{home: home, root: root}
		dirfd, err = w.openDir(p.view, p.parts, false)
		return err
	})
	if err != nil {
		fail(err)
		return
	}
	e.watches.mu.Lock()
	switch {
	case e.watches.stopped:
		err = errors.New("the session is ending")
	case len(e.watches.byID) >= maxSessionWatchers:
		err = fileErr(errclass.Conflict, "this session has %d directory watchers, the limit: stop one first", maxSessionWatchers)
	case e.watches.byID[m.ID] != nil:
		err = fmt.Errorf("watcher %s exists already", m.ID)
	}
	var dw *dirWatch
	if err == nil {
		dw, err = newDirWatch(fmt.Sprintf("/proc/self/fd/%d", dirfd), m.Watch.Recursive, sandbox.MaxWatchedDirs, sandbox.MaxQueuedWatchEvents)
		if ue := errors.Unwrap(err); ue != nil {
			err = errnoError(p.view, "watching", ue)
		}
	}
	if err == nil {
		if e.watches.byID == nil {
			e.watches.byID = map[string]*dirWatch{}
		}
		e.watches.byID[m.ID] = dw
	}
	e.watches.mu.Unlock()
	if err != nil {
		unix.Close(dirfd)
		fail(err)
		return
	}
	e.send(&protocol.Message{Kind: protocol.KindWatchStarted, ID: m.ID})
	defer unix.Close(dirfd)
	for ev := range dw.Events() {
		batch := []sandbox.WatchEvent{ev}
	more:
		for len(batch) < maxEventsPerMessage {
			select {
			case ev, ok := <-dw.Events():
				if !ok {
					break more
				}
				batch = append(batch, ev)
			default:
				break more
			}
		}
		e.send(&protocol.Message{Kind: protocol.KindWatchEvents, ID: m.ID, WatchEvents: batch})
	}
	e.send(&protocol.Message{Kind: protocol.KindWatchEnded, ID: m.ID})
}

// unwatch stops watcher id (its goroutine then sends KindWatchEnded); an unknown one is
// already gone.
func (e *Executor) unwatch(id string) {
	e.watches.mu.Lock()
	dw := e.watches.byID[id]
	delete(e.watches.byID, id)
	e.watches.mu.Unlock()
	if dw != nil {
		dw.Close()
	}
}

// stopWatches stops every watcher and refuses new ones.
func (e *Executor) stopWatches() {
	e.watches.mu.Lock()
	e.watches.stopped = true
	all := e.watches.byID
	e.watches.byID = nil
	e.watches.mu.Unlock()
	for _, dw := range all {
		dw.Close()
	}
}
