package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

func TestRoundTrip(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	sender, receiver := NewConn(a, a), NewConn(b, b)
	msgs := []*Message{
		{Kind: KindHello, Hello: &Hello{Version: Version, Slots: 4, Python: "3.11.2", PID: 7}},
		{Kind: KindRun, ID: "ex_1", Run: &Run{Slot: 2, Spec: sandbox.Spec{ID: "ex_1", Code: "print('测试 😀')", Input: json.RawMessage(`[1,2]`), TimeoutMS: 5}}},
		{Kind: KindStdout, ID: "ex_1", Data: "测试 😀\n"},
		{Kind: KindFile, ID: "ex_1", File: &sandbox.File{Name: "out/图.bin", SizeBytes: 3, MediaType: "application/octet-stream", SHA256: "ab"}, FileContent: []byte{0, 0xff, '\n'}},
		{Kind: KindResult, ID: "ex_1", Result: &sandbox.Result{Outcome: sandbox.OutcomeOK, Output: json.RawMessage(`{"n":3}`)}},
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, m := range msgs {
			if err := sender.Send(m); err != nil {
				t.Error(err)
			}
		}
	})
	for _, want := range msgs {
		got, err := receiver.Receive()
		if err != nil {
			t.Fatal(err)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Fatalf("got %s, want %s", gj, wj)
		}
	}
	wg.Wait()
}

func TestReadFrameErrors(t *testing.T) {
	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, MaxFrame+1)
	cases := []struct {
		name  string
		input []byte
		want  error
	}{
		{"clean end", nil, io.EOF},
		{"cut in the header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"cut in the body", []byte{0, 0, 0, 5, '{'}, io.ErrUnexpectedEOF},
		{"too large", huge, ErrFrameTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ReadFrame(bytes.NewReader(c.input)); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestReceiveRejectsMessagesWithoutKind(t *testing.T) {
	var buf bytes.Buffer
	body := []byte(`{"id":"x"}`)
	binary.Write(&buf, binary.BigEndian, uint32(len(body)))
	buf.Write(body)
	if _, err := NewConn(&buf, io.Discard).Receive(); err == nil {
		t.Fatal("message without kind accepted")
	}
}

// TestShortFrameDoesNotWait: a frame shorter than a data frame's header is read and judged
// at once, while the peer sends nothing more; a data frame's bytes arrive in a chunk buffer
// that Recycle takes back.
func TestShortFrameDoesNotWait(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	go func() { _, _ = w.Write([]byte{0, 0, 0, 2, '{', '}'}) }()
	if _, err := NewConn(r, io.Discard).Receive(); err == nil {
		t.Fatal("message without kind accepted")
	}
	var buf bytes.Buffer
	c := NewConn(&buf, &buf)
	if err := c.Send(&Message{Kind: KindEgressData, Egress: &Egress{Stream: 9}, Bytes: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Receive()
	if err != nil || string(m.Bytes) != "abc" || m.Egress.Stream != 9 || cap(m.Bytes) != EgressChunk {
		t.Fatalf("%+v %v", m, err)
	}
	c.Recycle(m.Bytes)
	if b := c.Chunk(); &b[0] != &m.Bytes[:1][0] {
		t.Error("a recycled chunk was not reused")
	}
}

// FuzzReceive feeds arbitrary bytes to the frame reader and decoder: they must never panic,
// and a message they accept must survive a round trip.
func FuzzReceive(f *testing.F) {
	seed := func(m *Message) []byte {
		var buf bytes.Buffer
		if err := NewConn(nil, &buf).Send(m); err != nil {
			f.Fatal(err)
		}
		return buf.Bytes()
	}
	f.Add(seed(&Message{Kind: KindHello, Hello: &Hello{Version: Version, Slots: 4}}))
	f.Add(seed(&Message{Kind: KindRun, ID: "ex", Run: &Run{Slot: 0, Spec: sandbox.Spec{Code: "print(open('in/a.csv').read())", Input: json.RawMessage("null"),
		TimeoutMS: 1, Charts: true, Files: []sandbox.InputFile{{Name: "in/a.csv", Content: []byte("a,b\n1,2\n")}}}}}))
	f.Add(seed(&Message{Kind: KindFile, ID: "ex", File: &sandbox.File{Name: "figure-1.png", SizeBytes: 4, MediaType: "image/png",
		SHA256: "0f0f"}, FileContent: []byte("\x89PNG")}))
	f.Add(seed(&Message{Kind: KindRun, ID: "ex", Run: &Run{Slot: 1, Spec: sandbox.Spec{Code: "print(1)", Input: json.RawMessage("null"), TimeoutMS: 1}}}))
	f.Add(seed(&Message{Kind: KindStderr, ID: "ex", Data: "\uFFFD 😀"}))
	f.Add(seed(&Message{Kind: KindRefused, ID: "ex", Error: "slot busy"}))
	f.Add(seed(&Message{Kind: KindCommand, ID: "pr_1", Command: &Command{Spec: sandbox.CommandSpec{Argv: []string{"bash", "-lc", "echo 1"},
		Env: map[string]string{"A": "b"}, TimeoutMS: 1000, Stdin: []byte("x"), PTY: &sandbox.TermSize{Rows: 24, Cols: 80}},
		Pip: PipOptions{IndexURL: "http://127.0.0.1:1/simple", TrustedHosts: []string{"127.0.0.1"}}}}))
	f.Add(seed(&Message{Kind: KindProcEnded, ID: "pr_1", ProcEnded: &sandbox.ProcessEnd{ExitCode: -1, Signal: "SIGKILL", Outcome: sandbox.OutcomeTimeout}}))
	f.Add(seed(&Message{Kind: KindProcSignal, ID: "pr_1", ProcSignal: &ProcSignal{Proc: "pr_1", Signal: "SIGINT"}}))
	f.Add(seed(&Message{Kind: KindProcInput, ID: "pr_1", ProcInput: &ProcInput{Proc: "pr_1", Data: []byte("q\n"), Close: true}}))
	f.Add(seed(&Message{Kind: KindFileWrite, ID: "fo_1", FileWrite: &sandbox.FileWrite{Path: "a/b.txt", Content: []byte("hi"), Parents: true}}))
	f.Add(seed(&Message{Kind: KindFileReply, ID: "fo_1", FileReply: &FileReply{Listing: &sandbox.FileListing{Entries: []sandbox.FileEntry{{Path: "/home/user/a", Name: "a", Type: "dir"}}}}}))
	f.Add(seed(&Message{Kind: KindFileReply, ID: "fo_2", Error: "no such file", ErrorClass: "not found"}))
	f.Add(seed(&Message{Kind: KindFileReply, ID: "fo_3", FileReply: &FileReply{Entry: &sandbox.FileEntry{Path: "/home/user/b", Name: "b", Type: "file", SizeBytes: 3}, Content: []byte("\x00{}")}}))
	f.Add([]byte{0, 0, 0, 6, blobFrame, 0, 0, 0, 9, '{'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := NewConn(bytes.NewReader(data), io.Discard).Receive()
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := NewConn(nil, &buf).Send(m); err != nil {
			t.Fatalf("an accepted message does not encode: %v", err)
		}
		again, err := NewConn(&buf, io.Discard).Receive()
		if err != nil || again.Kind != m.Kind || again.ID != m.ID {
			t.Fatalf("round trip: %+v %v", again, err)
		}
	})
}

// A file's bytes travel after the message's JSON, not in it, and come back where they were
// sent from; the message sent is left as it was; a file frame whose header says more than it
// holds, or whose message has no place for a file's bytes, is an error.
func TestBlobFrame(t *testing.T) {
	content := []byte("\x00{\"not\": json}\xff")
	for _, m := range []*Message{
		{Kind: KindFile, ID: "ex_1", File: &sandbox.File{Name: "a.bin", SizeBytes: int64(len(content))}, FileContent: content},
		{Kind: KindFileWrite, ID: "fo_1", FileWrite: &sandbox.FileWrite{Path: "a.bin", Content: content, Parents: true}},
		{Kind: KindFileReply, ID: "fo_2", FileReply: &FileReply{Entry: &sandbox.FileEntry{Name: "a.bin"}, Content: content}},
	} {
		var buf bytes.Buffer
		c := NewConn(&buf, &buf)
		if err := c.Send(m); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf.Bytes(), []byte("AHsi")) || !bytes.HasSuffix(buf.Bytes(), content) || buf.Bytes()[4] != blobFrame {
			t.Fatalf("%s: frame %q: want the bytes as they are, after the JSON", m.Kind, buf.Bytes())
		}
		got, err := c.Receive()
		if err != nil {
			t.Fatalf("%s: %v", m.Kind, err)
		}
		switch m.Kind {
		case KindFile:
			if !bytes.Equal(got.FileContent, content) || got.File.Name != "a.bin" || len(m.FileContent) == 0 {
				t.Fatalf("file: received %+v, sent %+v", got, m)
			}
		case KindFileWrite:
			if !bytes.Equal(got.FileWrite.Content, content) || !got.FileWrite.Parents || len(m.FileWrite.Content) == 0 {
				t.Fatalf("file write: received %+v, sent %+v", got.FileWrite, m.FileWrite)
			}
		case KindFileReply:
			if !bytes.Equal(got.FileReply.Content, content) || got.FileReply.Entry.Name != "a.bin" || len(m.FileReply.Content) == 0 {
				t.Fatalf("file reply: received %+v, sent %+v", got.FileReply, m.FileReply)
			}
		}
	}

	// An empty write stays a plain JSON frame.
	var buf bytes.Buffer
	c := NewConn(&buf, &buf)
	if err := c.Send(&Message{Kind: KindFileWrite, ID: "fo_3", FileWrite: &sandbox.FileWrite{Path: "empty"}}); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4] != '{' {
		t.Fatalf("an empty write's frame %q is not JSON", buf.Bytes())
	}
	if got, err := c.Receive(); err != nil || got.FileWrite.Path != "empty" || len(got.FileWrite.Content) != 0 {
		t.Fatalf("received %+v, %v", got, err)
	}

	for name, frame := range map[string][]byte{
		"header past the body": {0, 0, 0, 6, blobFrame, 0, 0, 0, 2, '{'},
		"no header":            {0, 0, 0, 3, blobFrame, 0, 0},
		"bytes for a hello":    append([]byte{0, 0, 0, 23, blobFrame, 0, 0, 0, 16}, `{"kind":"hello"}xy`...),
	} {
		if m, err := NewConn(bytes.NewReader(frame), io.Discard).Receive(); err == nil || !strings.Contains(err.Error(), "file") {
			t.Errorf("%s: received %+v, %v; want an error about the file frame", name, m, err)
		}
	}
}

func TestSendDoesNotEscapeHTML(t *testing.T) {
	var buf bytes.Buffer
	if err := NewConn(nil, &buf).Send(&Message{Kind: KindResult, Result: &sandbox.Result{Output: json.RawMessage(`"<&>"`)}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"output":"<&>"`)) {
		t.Fatalf("frame %q escapes HTML", buf.Bytes())
	}
}

// BenchmarkFileFrame sends and receives a 1 MiB file write as a blob frame, against the same
// message as JSON (its bytes in base64), which is how it travelled before protocol version 10.
func BenchmarkFileFrame(b *testing.B) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	m := &Message{Kind: KindFileWrite, ID: "fo_1", FileWrite: &sandbox.FileWrite{Path: "/home/user/x.bin", Content: content}}
	b.Run("blob", func(b *testing.B) {
		var buf bytes.Buffer
		c := NewConn(&buf, &buf)
		b.SetBytes(int64(len(content)))
		for b.Loop() {
			if err := c.Send(m); err != nil {
				b.Fatal(err)
			}
			if got, err := c.Receive(); err != nil || len(got.FileWrite.Content) != len(content) {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.SetBytes(int64(len(content)))
		for b.Loop() {
			body, err := json.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			var got Message
			if err := json.Unmarshal(body, &got); err != nil || len(got.FileWrite.Content) != len(content) {
				b.Fatal(err)
			}
		}
	})
}
