package e2b

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/e2b/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/internal/e2b/proto/process/processconnect"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Workspace is what envd needs of a session's workspace (engine.Sessions): its commands and
// its files by path.
type Workspace interface {
	Command(ctx context.Context, agent, id string, req engine.CommandRequest, emit func(engine.CommandEvent)) (engine.CommandResult, error)
	Processes(ctx context.Context, agent, id string) ([]engine.ProcessInfo, error)
	Attach(ctx context.Context, agent, id, pid string, tail bool, emit func(engine.CommandEvent)) (engine.ProcessInfo, error)
	Input(ctx context.Context, agent, id, pid string, data []byte, closeStdin bool) error
	Signal(ctx context.Context, agent, id, pid, signal string) error
	Resize(ctx context.Context, agent, id, pid string, size sandbox.TermSize) error
	ReadFile(ctx context.Context, agent, id, p string, offset, length int64) (sandbox.FileContent, error)
	WriteFile(ctx context.Context, agent, id, p string, r io.Reader, parents bool) (sandbox.FileEntry, error)
	ListFiles(ctx context.Context, agent, id, p string, depth int) (sandbox.FileListing, error)
	StatFile(ctx context.Context, agent, id, p string) (sandbox.FileEntry, error)
	MakeDir(ctx context.Context, agent, id, p string, parents bool) (sandbox.FileEntry, error)
	RenameFile(ctx context.Context, agent, id, from, to string, overwrite bool) (sandbox.FileEntry, error)
	RemoveFile(ctx context.Context, agent, id, p string, recursive bool) error
}

// keepalive is how often a stream with nothing to say sends a keepalive event, unless the
// client asks for another interval (Keepalive-Ping-Interval, in seconds).
const keepalive = 30 * time.Second

// MaxRPCMessageBytes caps one message of the Connect services, after decompression: 4 MiB, far
// above any request the SDKs send (stdin is sent in chunks); a larger one is resource_exhausted.
const MaxRPCMessageBytes = 4 << 20

// envdRoutes is envd (port 49983): /health, /files and the Connect services, with
// connectrpc.com/connect serving both of Connect's codecs (JSON and binary protobuf) and its
// streaming envelopes.
func (s *Server) envdRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	// Each message is read whole, decompressed, into memory: bound it (a trial's 300 MiB List
	// body, and a 400 KB gzip that unpacked to 400 MiB, took the daemon to 1.9 GB).
	limit := connect.WithReadMaxBytes(MaxRPCMessageBytes)
	mux.Handle(processconnect.NewProcessHandler(&processService{s}, limit))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{s, newWatchers()}, limit))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.Method+" "+r.URL.Path+" is not a route of envd: sandpit serves /health, /files and the filesystem and process services")
	})
	return mux
}

// connectError turns an engine error into a Connect error of the matching code.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch errclass.Of(err) {
	case errclass.Invalid:
		code = connect.CodeInvalidArgument
	case errclass.NotFound, errclass.Gone:
		code = connect.CodeNotFound
	case errclass.Conflict:
		code = connect.CodeFailedPrecondition
	case errclass.TooLarge, errclass.Busy:
		code = connect.CodeResourceExhausted
	case errclass.Unavailable:
		code = connect.CodeUnavailable
	case errclass.Forbidden:
		code = connect.CodePermissionDenied
	}
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, err)
}

// keepaliveInterval is the client's Keepalive-Ping-Interval, else keepalive.
func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return keepalive
}

// writeConnectError answers a Connect call that never reached its service.
func writeConnectError(w http.ResponseWriter, status int, msg string) {
	code := "unknown"
	switch status {
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusUnauthorized:
		code = "unauthenticated"
	case http.StatusBadGateway:
		code = "unavailable"
	}
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}
