package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/e2b/proto/filesystem"
	"github.com/sandpit-dev/sandpit/internal/e2b/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// fakeHome is a home whose box watchers are counted: started and not yet stopped.
type fakeHome struct {
	mu     sync.Mutex
	active int
}

func (h *fakeHome) StatFile(ctx context.Context, p string) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{Name: "user", Path: sandbox.SessionHome, Type: "dir", Mode: "0755"}, nil
}

func (h *fakeHome) WatchDir(ctx context.Context, id string, spec sandbox.WatchSpec, sink func([]sandbox.WatchEvent, error)) (func(), error) {
	h.mu.Lock()
	h.active++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.active--
			h.mu.Unlock()
		})
	}, nil
}

func (h *fakeHome) watching() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active
}

// onBox is a request for the test's sandbox named box.
func onBox[T any](box string, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("X-Box", box)
	return r
}

// TestWatchersAreCappedPerSandbox: WatchDir's streams and CreateWatcher's watchers share one
// cap per sandbox, another sandbox is unaffected, and a removed watcher or closed stream
// stops its box watcher (64 streaming recursive watchers on a home of 10 000 entries took
// the daemon from 146 to 430 MiB and OOM-killed the sandbox's executor).
func TestWatchersAreCappedPerSandbox(t *testing.T) {
	home := &fakeHome{}
	boxes := map[string]*box{"a": {id: "sb_a", watchFS: home}, "b": {id: "sb_b", watchFS: home}}
	path, h := filesystemconnect.NewFilesystemHandler(&filesystemService{s: &Server{}, watchers: newWatchers()})
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), boxKey{}, boxes[r.Header.Get("X-Box")])))
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	fsc := filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL)
	// watch opens a stream on the sandbox and waits for its start event (or its refusal).
	watch := func(ctx context.Context, on string) error {
		st, err := fsc.WatchDir(ctx, onBox(on, &filesystem.WatchDirRequest{Path: sandbox.SessionHome, Recursive: true}))
		if err != nil {
			return err
		}
		if !st.Receive() {
			return st.Err()
		}
		return nil
	}
	create := func(on string) (string, error) {
		resp, err := fsc.CreateWatcher(t.Context(), onBox(on, &filesystem.CreateWatcherRequest{Path: sandbox.SessionHome, Recursive: true}))
		if err != nil {
			return "", err
		}
		return resp.Msg.GetWatcherId(), nil
	}
	refused := func(what string, err error) {
		t.Helper()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || !strings.Contains(ce.Message(), fmt.Sprint(maxWatchers)) {
			t.Fatalf("%s past the cap: %v, want resource_exhausted naming the cap of %d", what, err, maxWatchers)
		}
	}

	cancels := make([]context.CancelFunc, 0, maxWatchers)
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range maxWatchers - 1 {
		ctx, cancel := context.WithCancel(t.Context())
		cancels = append(cancels, cancel)
		if err := watch(ctx, "a"); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
	}
	id, err := create("a")
	if err != nil {
		t.Fatalf("a polling watcher as the %dth: %v", maxWatchers, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	refused("a WatchDir stream", watch(ctx, "a"))
	_, err = create("a")
	refused("CreateWatcher", err)

	// Another sandbox watches as before.
	if err := watch(ctx, "b"); err != nil {
		t.Fatalf("another sandbox's stream: %v", err)
	}

	// A removed watcher and a closed stream each free their place.
	if _, err := fsc.RemoveWatcher(t.Context(), onBox("a", &filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	id2, err := create("a")
	if err != nil {
		t.Fatalf("after RemoveWatcher: %v", err)
	}
	cancels[0]()
	deadline := time.Now().Add(5 * time.Second)
	for {
		sctx, scancel := context.WithCancel(t.Context())
		cancels = append(cancels, scancel)
		err := watch(sctx, "a")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream after another closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Every box watcher started is stopped once its stream closes or its watcher is removed.
	for _, c := range cancels {
		c()
	}
	for _, id := range []string{id2} {
		if _, err := fsc.RemoveWatcher(t.Context(), onBox("a", &filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	for home.watching() > 0 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("%d box watchers still run after every stream closed and every watcher was removed", home.watching())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
