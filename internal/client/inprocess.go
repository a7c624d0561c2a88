package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// InProcess returns a Client whose requests h serves in this process (see handlerTransport):
// the REST API of an engine this process runs, reached through the same handler, limits and
// decoding as a daemon's, without the network. Its errors name no address.
func InProcess(h http.Handler) *Client {
	return New("", &http.Client{Transport: handlerTransport{h}})
}

// handlerTransport is an http.RoundTripper that serves each request with a handler in this
// process: the CLI's own engine and the MCP tools reach the REST API without the network (and
// without its guards, which the MCP request already passed), yet as a network client would:
//
//   - the answer streams: its body is read while the handler writes it (through a pipe, not a
//     buffer), so an NDJSON stream arrives line by line;
//   - the handler's request context ends when the caller's does, or when the caller closes the
//     answer's body early, as a server's does when its client disconnects;
//   - an answer the handler writes after the caller's context ended is still returned: a run
//     stopped because its caller went away answers its result (outcome killed, with its
//     execution ID). Only when the handler wrote nothing at all is the caller's context error
//     returned.
//
// A handler that panics ends its answer with an error (before the header: RoundTrip's error).
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	req := r.WithContext(ctx)
	req.RequestURI = r.URL.RequestURI()
	if req.Body == nil {
		req.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, sent: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("the in-process API handler failed: %v", p)
			}
			pw.CloseWithError(err) // nil: io.EOF for the reader
			cancel()
			done <- err
		}()
		t.h.ServeHTTP(w, req)
	}()
	select {
	case <-w.sent:
	case err := <-done:
		select {
		case <-w.sent: // the handler wrote its answer, then returned
		default:
			if err == nil {
				err = r.Context().Err() // the caller went away and the handler answered nothing
			}
			if err != nil {
				return nil, err
			}
			w.WriteHeader(http.StatusOK) // a handler that writes nothing answers 200, as net/http's
		}
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sentHeader,
		Body:          &pipeBody{PipeReader: pr, cancel: cancel},
		ContentLength: -1,
		Request:       r,
	}, nil
}

// pipeWriter is the http.ResponseWriter of a handlerTransport's handler. Its header is
// frozen (copied) when first written; Flush sends the header without a body.
type pipeWriter struct {
	header     http.Header
	body       *io.PipeWriter
	once       sync.Once
	sent       chan struct{} // closed when status and sentHeader are set
	status     int
	sentHeader http.Header
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code < 200 {
		return // informational: not an answer
	}
	w.once.Do(func() {
		w.status, w.sentHeader = code, w.header.Clone()
		close(w.sent)
	})
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	n, err := w.body.Write(p)
	if errors.Is(err, io.ErrClosedPipe) {
		err = errBodyClosed
	}
	return n, err
}

func (w *pipeWriter) Flush() { w.WriteHeader(http.StatusOK) }

// errBodyClosed is what a handler's write gets once the caller has closed the answer's body.
var errBodyClosed = errors.New("the in-process caller closed the answer")

// pipeBody is the body of a handlerTransport's answer: closing it early ends the handler's
// request context, as a disconnect does.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}
