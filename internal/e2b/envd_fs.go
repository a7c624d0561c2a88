package e2b

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandpit-dev/sandpit/internal/e2b/proto/filesystem"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// filesystemService is envd's filesystem.Filesystem over the session's files.
type filesystemService struct {
	s        *Server
	watchers *watchers
}

// entryInfo is a workspace entry as envd's EntryInfo.
func entryInfo(e sandbox.FileEntry) *filesystem.EntryInfo {
	perm, _ := strconv.ParseUint(e.Mode, 8, 32)
	mode := fs.FileMode(perm) & fs.ModePerm
	info := &filesystem.EntryInfo{Name: e.Name, Path: e.Path, Size: e.SizeBytes, Owner: "user", Group: "user",
		ModifiedTime: timestamppb.New(e.ModifiedAt)}
	switch e.Type {
	case "file":
		info.Type = filesystem.FileType_FILE_TYPE_FILE
	case "dir":
		info.Type, mode = filesystem.FileType_FILE_TYPE_DIRECTORY, mode|fs.ModeDir
	case "symlink":
		// E2B's filesystem.proto has no type for a link: envd answers its target's (see
		// followLink), with the target's absolute path.
		info.Type, mode = filesystem.FileType_FILE_TYPE_FILE, mode|fs.ModeSymlink
		target := e.Target
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(e.Path), target)
		}
		info.SymlinkTarget = &target
	}
	info.Mode, info.Permissions = uint32(mode.Perm()), mode.String()
	return info
}

// maxLinkHops bounds how many links followLink follows; maxLinksFollowed how many links of
// one listing are followed (each is a read of the box; the rest are answered as files).
const (
	maxLinkHops      = 8
	maxLinksFollowed = 256
)

// followLink gives a link's info its target's type and the path the links lead to, as envd
// does; a target that cannot be read (gone, outside the home) leaves it a file.
func (s *Server) followLink(ctx context.Context, b *box, info *filesystem.EntryInfo) {
	if info.SymlinkTarget == nil {
		return
	}
	target := info.GetSymlinkTarget()
	for range maxLinkHops {
		e, err := b.sess.StatFile(ctx, target)
		if err != nil {
			return
		}
		switch e.Type {
		case "symlink":
			target = entryInfo(e).GetSymlinkTarget()
			continue
		case "dir":
			info.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
		}
		info.SymlinkTarget = &e.Path
		return
	}
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	b := boxOf(ctx)
	e, err := b.sess.StatFile(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err)
	}
	info := entryInfo(e)
	f.s.followLink(ctx, b, info)
	return connect.NewResponse(&filesystem.StatResponse{Entry: info}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	b := boxOf(ctx)
	if e, err := b.sess.StatFile(ctx, req.Msg.GetPath()); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s exists already (a %s)", e.Path, e.Type))
	}
	e, err := b.sess.MakeDir(ctx, req.Msg.GetPath(), true)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	b := boxOf(ctx)
	e, err := b.sess.RenameFile(ctx, req.Msg.GetSource(), req.Msg.GetDestination(), true)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	b := boxOf(ctx)
	depth := int(max(req.Msg.GetDepth(), 1))
	list, err := b.sess.ListFiles(ctx, req.Msg.GetPath(), depth)
	if err != nil {
		return nil, connectError(err)
	}
	out := &filesystem.ListDirResponse{}
	links := 0
	for _, e := range list.Entries {
		info := entryInfo(e)
		if e.Type == "symlink" && links < maxLinksFollowed {
			links++
			f.s.followLink(ctx, b, info)
		}
		out.Entries = append(out.Entries, info)
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	b := boxOf(ctx)
	// As envd: removing what is not there succeeds.
	if err := b.sess.RemoveFile(ctx, req.Msg.GetPath(), true); err != nil && errclass.Of(err) != errclass.NotFound {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// Watching: the box watches the directory with inotify (sandbox.Workspace.WatchDir) and
// passes each change on as it happens, in E2B's shape: create, write, remove, rename, chmod,
// names relative to the watched directory. A WatchDir stream is started (its start event
// sent) once the box's watch is in place, so a change made after it is always reported.
//
// What one sandbox's watchers cost is bounded: at most maxWatchers of them (WatchDir's
// streams and CreateWatcher's together); in the box, each watches at most
// sandbox.MaxWatchedDirs directories and keeps at most sandbox.MaxQueuedWatchEvents events;
// here, a CreateWatcher watcher keeps at most maxPendingEvents until GetWatcherEvents takes
// them and a stream at most that many not yet sent. Events lost past any of these bounds are
// said to be lost: a stream ends with resource_exhausted, a watcher's next GetWatcherEvents
// answers it, both naming what was lost.

const (
	maxPendingEvents = 1000
	maxWatchers      = 16 // per sandbox, streaming and polling together
)

// watchFS is what a watcher watches: the sandbox's session.
type watchFS interface {
	StatFile(ctx context.Context, p string) (sandbox.FileEntry, error)
	WatchDir(ctx context.Context, id string, spec sandbox.WatchSpec, sink func(events []sandbox.WatchEvent, end error)) (stop func(), err error)
}

// files is what b's watchers watch: its session, unless a test set watchFS.
func (b *box) files() watchFS {
	if b.watchFS != nil {
		return b.watchFS
	}
	return b.sess
}

var eventTypes = map[sandbox.WatchOp]filesystem.EventType{
	sandbox.WatchCreate: filesystem.EventType_EVENT_TYPE_CREATE,
	sandbox.WatchWrite:  filesystem.EventType_EVENT_TYPE_WRITE,
	sandbox.WatchRemove: filesystem.EventType_EVENT_TYPE_REMOVE,
	sandbox.WatchRename: filesystem.EventType_EVENT_TYPE_RENAME,
	sandbox.WatchChmod:  filesystem.EventType_EVENT_TYPE_CHMOD,
}

// lostError is what a watcher that lost events answers.
func lostError(why string) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the watcher lost events: %s", why))
}

// startWatch checks that dir is a directory and starts the box's watcher of it; sink gets
// the changes (see sandbox.Workspace.WatchDir).
func startWatch(ctx context.Context, fsys watchFS, dir string, recursive bool, sink func([]sandbox.WatchEvent, error)) (root string, stop func(), err error) {
	ent, err := fsys.StatFile(ctx, dir)
	if err != nil {
		return "", nil, connectError(err)
	}
	if ent.Type != "dir" {
		return "", nil, connectError(errclass.Newf(errclass.Invalid, "%s is not a directory: watch a directory", ent.Path))
	}
	stop, err = fsys.WatchDir(ctx, "w_"+newToken()[:24], sandbox.WatchSpec{Path: ent.Path, Recursive: recursive}, sink)
	if err != nil {
		return "", nil, connectError(err)
	}
	return ent.Path, stop, nil
}

// toEvent is ev in E2B's shape, with its entry when withEntry is set and it still exists.
func toEvent(ctx context.Context, fsys watchFS, root string, ev sandbox.WatchEvent, withEntry bool) *filesystem.FilesystemEvent {
	fe := &filesystem.FilesystemEvent{Name: ev.Name, Type: eventTypes[ev.Op]}
	if withEntry && ev.Op != sandbox.WatchRemove && ev.Op != sandbox.WatchRename {
		p := root
		if ev.Name != "" {
			p = root + "/" + ev.Name
		}
		if e, err := fsys.StatFile(ctx, p); err == nil {
			fe.Entry = entryInfo(e)
		}
	}
	return fe
}

// pending is a watcher's events not yet taken, at most maxPendingEvents; lost says why
// events were lost, once some were.
type pending struct {
	mu     sync.Mutex
	events []sandbox.WatchEvent
	lost   string
	end    error
	notify chan struct{} // capacity 1
}

func newPending() *pending { return &pending{notify: make(chan struct{}, 1)} }

// sink is the box watcher's sink.
func (p *pending) sink(events []sandbox.WatchEvent, end error) {
	p.mu.Lock()
	for _, ev := range events {
		switch {
		case ev.Op == sandbox.WatchOverflow:
			if p.lost == "" {
				p.lost = ev.Detail
			}
		case len(p.events) >= maxPendingEvents:
			if p.lost == "" {
				p.lost = fmt.Sprintf("more than %d events were not taken in time", maxPendingEvents)
			}
		default:
			p.events = append(p.events, ev)
		}
	}
	if end != nil && p.end == nil {
		p.end = end
	}
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// take returns the events kept, and why events were lost or the watcher ended, if so.
func (p *pending) take() ([]sandbox.WatchEvent, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	events, lost, end := p.events, p.lost, p.end
	p.events, p.lost = nil, ""
	return events, lost, end
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	b := boxOf(ctx)
	if err := f.watchers.acquire(b.id); err != nil {
		return err
	}
	defer f.watchers.release(b.id)
	done, err := f.s.openStream(ctx)
	if err != nil {
		return err
	}
	defer done()
	fsys := b.files()
	q := newPending()
	root, stop, err := startWatch(ctx, fsys, req.Msg.GetPath(), req.Msg.GetRecursive(), q.sink)
	if err != nil {
		return err
	}
	defer stop()
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	every := keepaliveInterval(req.Header())
	keepalive := time.NewTimer(every)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			keepalive.Reset(every)
			continue
		case <-q.notify:
		}
		events, lost, end := q.take()
		for _, ev := range events {
			fe := toEvent(ctx, fsys, root, ev, req.Msg.GetIncludeEntry())
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
				return err
			}
		}
		if len(events) > 0 {
			keepalive.Reset(every)
		}
		switch {
		case lost != "":
			return lostError(lost + "; watch the directory again")
		case end != nil:
			if f.s.state(b) == "" {
				return nil // the sandbox ended
			}
			return connectError(end)
		}
	}
}

// watchers are the polling watchers of CreateWatcher, by ID, and how many watchers of either
// kind each sandbox has.
type watchers struct {
	mu     sync.Mutex
	byID   map[string]*watcher
	active map[string]int // by sandbox
}

type watcher struct {
	sandbox   string
	stop      func() // stops the box's watcher
	q         *pending
	fsys      watchFS
	root      string
	withEntry bool
	gone      chan struct{} // closed when removed
}

func newWatchers() *watchers { return &watchers{byID: map[string]*watcher{}, active: map[string]int{}} }

// acquire counts a new watcher of the sandbox, or refuses it past maxWatchers.
func (ws *watchers) acquire(sandbox string) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.active[sandbox] >= maxWatchers {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("this sandbox has %d watchers (WatchDir streams and CreateWatcher watchers together), "+
			"the limit: close a WatchDir stream or remove a watcher with RemoveWatcher", maxWatchers))
	}
	ws.active[sandbox]++
	return nil
}

// release uncounts a watcher of the sandbox.
func (ws *watchers) release(sandbox string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.releaseLocked(sandbox)
}

func (ws *watchers) releaseLocked(sandbox string) {
	if ws.active[sandbox]--; ws.active[sandbox] <= 0 {
		delete(ws.active, sandbox)
	}
}

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	b := boxOf(ctx)
	if err := f.watchers.acquire(b.id); err != nil {
		return nil, err
	}
	q := newPending()
	fsys := b.files()
	root, stop, err := startWatch(ctx, fsys, req.Msg.GetPath(), req.Msg.GetRecursive(), q.sink)
	if err != nil {
		f.watchers.release(b.id)
		return nil, err
	}
	// The watcher lives until removed or its sandbox ends, not as long as this request.
	w := &watcher{sandbox: b.id, stop: stop, gone: make(chan struct{}), q: q, fsys: fsys, root: root, withEntry: req.Msg.GetIncludeEntry()}
	id := "w_" + newToken()[:24]
	f.watchers.mu.Lock()
	f.watchers.byID[id] = w
	f.watchers.mu.Unlock()
	go func() {
		// A watcher whose sandbox ended goes, with its place under the cap; one whose box
		// watcher ended otherwise stays until removed, GetWatcherEvents saying why.
		for {
			select {
			case <-w.gone:
				return
			case <-q.notify:
			}
			q.mu.Lock()
			end := q.end
			q.mu.Unlock()
			if end != nil {
				if f.s.state(b) == "" {
					f.watchers.remove(id)
				}
				return
			}
		}
	}()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (ws *watchers) get(b *box, id string) (*watcher, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.byID[id]
	if w == nil || w.sandbox != b.id {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q is not one of this sandbox's: CreateWatcher makes one", id))
	}
	return w, nil
}

func (ws *watchers) remove(id string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.byID[id]; w != nil {
		w.stop()
		close(w.gone)
		delete(ws.byID, id)
		ws.releaseLocked(w.sandbox)
	}
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	w, err := f.watchers.get(boxOf(ctx), req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	events, lost, end := w.q.take()
	if len(events) == 0 {
		switch {
		case lost != "":
			return nil, lostError(lost + "; remove the watcher and create another")
		case end != nil:
			return nil, connectError(end)
		}
	} else if lost != "" {
		// Said at the next call, after the events kept.
		w.q.mu.Lock()
		if w.q.lost == "" {
			w.q.lost = lost
		}
		w.q.mu.Unlock()
	}
	out := make([]*filesystem.FilesystemEvent, 0, len(events))
	for _, ev := range events {
		out = append(out, toEvent(ctx, w.fsys, w.root, ev, w.withEntry))
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: out}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	if _, err := f.watchers.get(boxOf(ctx), req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	f.watchers.remove(req.Msg.GetWatcherId())
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
