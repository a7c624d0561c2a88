package e2b

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
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
		info.Type, mode = filesystem.FileType_FILE_TYPE_SYMLINK, mode|fs.ModeSymlink
		target := e.Target
		info.SymlinkTarget = &target
	}
	info.Mode, info.Permissions = uint32(mode.Perm()), mode.String()
	return info
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	b := boxOf(ctx)
	e, err := f.s.workspace.StatFile(ctx, b.agent, b.id, req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	b := boxOf(ctx)
	if e, err := f.s.workspace.StatFile(ctx, b.agent, b.id, req.Msg.GetPath()); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s exists already (a %s)", e.Path, e.Type))
	}
	e, err := f.s.workspace.MakeDir(ctx, b.agent, b.id, req.Msg.GetPath(), true)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	b := boxOf(ctx)
	e, err := f.s.workspace.RenameFile(ctx, b.agent, b.id, req.Msg.GetSource(), req.Msg.GetDestination(), true)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	b := boxOf(ctx)
	depth := int(max(req.Msg.GetDepth(), 1))
	list, err := f.s.workspace.ListFiles(ctx, b.agent, b.id, req.Msg.GetPath(), depth)
	if err != nil {
		return nil, connectError(err)
	}
	out := &filesystem.ListDirResponse{}
	for _, e := range list.Entries {
		out.Entries = append(out.Entries, entryInfo(e))
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	b := boxOf(ctx)
	if err := f.s.workspace.RemoveFile(ctx, b.agent, b.id, req.Msg.GetPath(), true); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// Watching: the workspace has no change notifications to offer, so a watcher polls the
// directory's listing every pollEvery and reports the differences: an entry that appeared
// (create), changed its size or modification time (write) or went (remove).

const (
	pollEvery = 250 * time.Millisecond
	// maxWatchedEntries bounds one poll's listing; maxPendingEvents the events a polling
	// watcher keeps until GetWatcherEvents takes them (older ones are dropped).
	maxWatchedEntries = 10_000
	maxPendingEvents  = 1000
	maxWatchers       = 16 // per sandbox
	watchDepth        = 32 // levels below the directory, when recursive
)

type snapshot map[string]sandbox.FileEntry

// poll lists dir (depth levels) as a snapshot keyed by path relative to dir.
func (s *Server) poll(ctx context.Context, b *box, dir string, recursive bool) (snapshot, string, error) {
	depth := 1
	if recursive {
		depth = watchDepth
	}
	root, err := s.workspace.StatFile(ctx, b.agent, b.id, dir)
	if err != nil {
		return nil, "", err
	}
	if root.Type != "dir" {
		return nil, "", errclass.Newf(errclass.Invalid, "%s is not a directory: watch a directory", root.Path)
	}
	list, err := s.workspace.ListFiles(ctx, b.agent, b.id, dir, depth)
	if err != nil {
		return nil, "", err
	}
	snap := make(snapshot, len(list.Entries))
	for _, e := range list.Entries[:min(len(list.Entries), maxWatchedEntries)] {
		snap[strings.TrimPrefix(strings.TrimPrefix(e.Path, root.Path), "/")] = e
	}
	return snap, root.Path, nil
}

// diff returns the events that lead from before to after.
func diff(before, after snapshot, withEntry bool) []*filesystem.FilesystemEvent {
	var events []*filesystem.FilesystemEvent
	ev := func(name string, t filesystem.EventType, e *sandbox.FileEntry) {
		fe := &filesystem.FilesystemEvent{Name: name, Type: t}
		if withEntry && e != nil {
			fe.Entry = entryInfo(*e)
		}
		events = append(events, fe)
	}
	for name, e := range after {
		old, ok := before[name]
		switch {
		case !ok:
			ev(name, filesystem.EventType_EVENT_TYPE_CREATE, &e)
		case old.SizeBytes != e.SizeBytes || !old.ModifiedAt.Equal(e.ModifiedAt):
			ev(name, filesystem.EventType_EVENT_TYPE_WRITE, &e)
		case old.Mode != e.Mode:
			ev(name, filesystem.EventType_EVENT_TYPE_CHMOD, &e)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			ev(name, filesystem.EventType_EVENT_TYPE_REMOVE, nil)
		}
	}
	return events
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	b := boxOf(ctx)
	snap, _, err := f.s.poll(ctx, b, req.Msg.GetPath(), req.Msg.GetRecursive())
	if err != nil {
		return connectError(err)
	}
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	quiet, every := time.Now(), keepaliveInterval(req.Header())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		next, _, err := f.s.poll(ctx, b, req.Msg.GetPath(), req.Msg.GetRecursive())
		if err != nil {
			return connectError(err)
		}
		for _, ev := range diff(snap, next, req.Msg.GetIncludeEntry()) {
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			quiet = time.Now()
		}
		snap = next
		if time.Since(quiet) >= every {
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			quiet = time.Now()
		}
	}
}

// watchers are the polling watchers of CreateWatcher, by ID.
type watchers struct {
	mu   sync.Mutex
	byID map[string]*watcher
}

type watcher struct {
	sandbox string
	cancel  context.CancelFunc
	mu      sync.Mutex
	events  []*filesystem.FilesystemEvent
	err     error
}

func newWatchers() *watchers { return &watchers{byID: map[string]*watcher{}} }

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	b := boxOf(ctx)
	snap, _, err := f.s.poll(ctx, b, req.Msg.GetPath(), req.Msg.GetRecursive())
	if err != nil {
		return nil, connectError(err)
	}
	f.watchers.mu.Lock()
	n := 0
	for _, w := range f.watchers.byID {
		if w.sandbox == b.id {
			n++
		}
	}
	f.watchers.mu.Unlock()
	if n >= maxWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("this sandbox has %d watchers, the limit: remove one with RemoveWatcher", maxWatchers))
	}
	// The watcher lives until removed or its sandbox ends, not as long as this request.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watcher{sandbox: b.id, cancel: cancel}
	id := "w_" + newToken()[:24]
	f.watchers.mu.Lock()
	f.watchers.byID[id] = w
	f.watchers.mu.Unlock()
	go func() {
		defer f.watchers.remove(id)
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			next, _, err := f.s.poll(wctx, b, req.Msg.GetPath(), req.Msg.GetRecursive())
			if err != nil {
				if !f.s.live(wctx, b) {
					return // the sandbox ended
				}
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				continue
			}
			events := diff(snap, next, req.Msg.GetIncludeEntry())
			snap = next
			w.mu.Lock()
			w.events = append(w.events, events...)
			if over := len(w.events) - maxPendingEvents; over > 0 {
				w.events = w.events[over:]
			}
			w.mu.Unlock()
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
		w.cancel()
		delete(ws.byID, id)
	}
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	w, err := f.watchers.get(boxOf(ctx), req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	events, werr := w.events, w.err
	w.events, w.err = nil, nil
	w.mu.Unlock()
	if werr != nil && len(events) == 0 {
		return nil, connectError(werr)
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	if _, err := f.watchers.get(boxOf(ctx), req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	f.watchers.remove(req.Msg.GetWatcherId())
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
