package e2b

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/e2b/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/internal/e2b/proto/process/processconnect"
)

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

// connectError turns an error into a Connect error of its code (see classes).
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connectCode(err), err)
}

// keepaliveInterval is the client's Keepalive-Ping-Interval, else keepalive.
func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return keepalive
}

// writeConnectError answers a Connect call that never reached its service, with the Connect
// code of its status (the codes' own mapping, from the Connect protocol's spec).
func writeConnectError(w http.ResponseWriter, status int, msg string) {
	code := "unknown"
	switch status {
	case http.StatusNotFound:
		code = connect.CodeNotFound.String()
	case http.StatusUnauthorized:
		code = connect.CodeUnauthenticated.String()
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		code = connect.CodeUnavailable.String()
	case http.StatusConflict:
		code = connect.CodeFailedPrecondition.String()
	}
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}
