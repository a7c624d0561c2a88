package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func inProcess(h http.HandlerFunc) *http.Client {
	return &http.Client{Transport: handlerTransport{h}}
}

// The answer streams: the caller reads the first line while the handler has not written the
// second; status, header and the request's path and body arrive as a server's would.
func TestHandlerTransportStreams(t *testing.T) {
	next := make(chan struct{})
	c := inProcess(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path+" "+r.RequestURI)
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-Late", "not sent") // after the header was written
		io.WriteString(w, "got "+string(body)+"\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "second\n")
	})
	resp, err := c.Post("/v1/things?x=1", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Path") != "/v1/things /v1/things?x=1" || resp.Header.Get("X-Late") != "" {
		t.Fatalf("answer: %d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "got hello\n" {
		t.Fatalf("first line: %q", line)
	}
	close(next)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Fatalf("rest: %q", rest)
	}
}

// When the caller's context ends, the handler's does; what the handler then answers (a run's
// killed result) still reaches the caller. A handler that answers nothing gives the caller its
// context's error; one that answers nothing while the caller waits gives a 200, as net/http.
func TestHandlerTransportCancel(t *testing.T) {
	c := inProcess(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		if r.URL.Path == "/answers" {
			io.WriteString(w, "stopped: "+r.Context().Err().Error())
		}
	})
	for path, want := range map[string]string{"/answers": "stopped: context canceled", "/silent": ""} {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", path, nil)
		resp, err := c.Do(req)
		if want == "" {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s: %v, want context.Canceled", path, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want {
			t.Fatalf("%s: %q, want %q", path, body, want)
		}
	}
	resp, err := inProcess(func(http.ResponseWriter, *http.Request) {}).Get("/nothing")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a handler that writes nothing: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Closing the answer early ends the handler's context and fails its writes, as a client's
// disconnect does; a handler's panic is the caller's error.
func TestHandlerTransportCloseAndPanic(t *testing.T) {
	ended := make(chan error, 1)
	c := inProcess(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		io.WriteString(w, "start\n")
		<-r.Context().Done()
		_, err := io.WriteString(w, "more\n")
		ended <- err
	})
	resp, err := c.Get("/stream")
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if err := <-ended; line != "start\n" || !errors.Is(err, errBodyClosed) {
		t.Fatalf("read %q; the handler's write after the close: %v", line, err)
	}
	if _, err := c.Get("/panic"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("a panicking handler: %v", err)
	}
}
