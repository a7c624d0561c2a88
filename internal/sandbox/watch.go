package sandbox

// Watching a session's directory (Workspace.WatchDir): the box watches it with inotify and
// passes each change on as it happens.

// MaxWatchedDirs bounds the directories one watcher watches (the directory and, when
// recursive, its subdirectories); MaxQueuedWatchEvents the events the box keeps for a watcher
// that has not taken them yet. Past either, the watcher says so with a WatchOverflow event.
const (
	MaxWatchedDirs       = 1000
	MaxQueuedWatchEvents = 4096
)

// WatchOp is what happened to a watched entry, in E2B's names.
type WatchOp string

// The operations of a WatchEvent.
const (
	WatchCreate WatchOp = "create" // the entry appeared (also: moved in)
	WatchWrite  WatchOp = "write"  // the file's content changed
	WatchRemove WatchOp = "remove" // the entry went
	WatchRename WatchOp = "rename" // the entry was moved away (its new name, if watched, comes as create)
	WatchChmod  WatchOp = "chmod"  // the entry's mode, owner or times changed
	// WatchOverflow says events were lost: the kernel's queue overflowed, the reader fell
	// behind, or a directory past MaxWatchedDirs is not watched. Detail says which.
	WatchOverflow WatchOp = "overflow"
)

// WatchEvent is one change under a watched directory.
type WatchEvent struct {
	// Name is the entry's path relative to the watched directory, with "/" separators; ""
	// for the directory itself.
	Name   string  `json:"name,omitempty"`
	Op     WatchOp `json:"op"`
	Detail string  `json:"detail,omitempty"` // WatchOverflow only: what was lost and why
}

// WatchSpec is a directory to watch: Path under SessionHome (relative paths start there),
// and, when Recursive, its subdirectories (up to WatchDepth levels below, new ones as they
// appear).
type WatchSpec struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// WatchDepth bounds how many levels below the watched directory a recursive watch descends.
const WatchDepth = 32
