package session

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// readBox is a fakeBox whose reads answer from one shared buffer; when gate is set each read
// says it entered and waits for a value on gate.
type readBox struct {
	*fakeBox
	buf      []byte
	entered  chan struct{}
	gate     chan struct{}
	inFlight atomic.Int32
	most     atomic.Int32
}

func (b *readBox) ReadFile(ctx context.Context, op sandbox.FileRead) (sandbox.FileContent, error) {
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	if b.gate != nil {
		b.entered <- struct{}{}
		<-b.gate
	}
	want := readWanted(op.Length)
	return sandbox.FileContent{Entry: sandbox.FileEntry{Path: op.Path, Type: "file", SizeBytes: int64(len(b.buf))},
		Content: b.buf[:min(want, int64(len(b.buf)))]}, nil
}

type readOpener struct{ box *readBox }

func (o readOpener) OpenSession(context.Context, string) (sandbox.SessionBox, error) {
	return o.box, nil
}

func newReads(t *testing.T, box *readBox) (*keeper, string) {
	t.Helper()
	svc := newService(engine.Hooks{})
	m := newKeeper(svc, readOpener{box}, nil, DefaultConfig())
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	return m, s.ID
}

// TestLargeReadsOneAtATime: six parallel reads of a 32 MiB file all succeed, and the box
// serves them one at a time (a box holds each read whole while it answers: parallel ones
// could exhaust its memory and end the session). ReadFile and LookFile share the turn.
func TestLargeReadsOneAtATime(t *testing.T) {
	box := &readBox{fakeBox: newFakeBox(), buf: make([]byte, MaxReadBytes),
		entered: make(chan struct{}), gate: make(chan struct{})}
	m, id := newReads(t, box)
	const reads = 6
	var wg sync.WaitGroup
	errs := make(chan error, reads)
	for i := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			read := m.ReadFile
			if i%2 == 1 {
				read = m.LookFile // the console's downloads
			}
			got, err := read(t.Context(), "a", id, "big32", 0, 0)
			if err == nil && len(got.Content) != MaxReadBytes {
				err = errclass.New(errclass.Invalid, "short read")
			}
			got.Done()
			errs <- err
		}()
	}
	for range reads {
		<-box.entered
		if n := box.inFlight.Load(); n != 1 {
			t.Errorf("%d reads in the box at once; want 1", n)
		}
		box.gate <- struct{}{}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a read failed: %v", err)
		}
	}
	if most := box.most.Load(); most != 1 {
		t.Errorf("at most %d reads were in the box at once; want 1", most)
	}
	if held, _ := m.reads.usage(); held != 0 {
		t.Errorf("%d bytes still held in the read budget after every answer was done", held)
	}
}

// TestReadBudget: answers not yet written hold their bytes in the daemon-wide budget; once it
// is full the next read is refused (busy, naming reads_max_bytes) rather than held, the budget
// never holds more than its total, and done answers free it.
func TestReadBudget(t *testing.T) {
	box := &readBox{fakeBox: newFakeBox(), buf: make([]byte, MaxReadBytes)}
	m, id := newReads(t, box)
	// The reads of eight agents, each within its share, fill the budget.
	agents := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	ids := map[string]string{"a": id}
	for _, agent := range agents[1:] {
		s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		ids[agent] = s.ID
	}
	const length = 8 << 20
	var held []sandbox.FileContent
	var err error
	for i := range 100 {
		var got sandbox.FileContent
		agent := agents[i%len(agents)]
		if got, err = m.ReadFile(t.Context(), agent, ids[agent], "big", 0, length); err != nil {
			break
		}
		held = append(held, got)
		if h, _ := m.reads.usage(); h > m.reads.total {
			t.Fatalf("the budget holds %d bytes; its total is %d", h, m.reads.total)
		}
	}
	if errclass.Of(err) != errclass.Busy || !strings.Contains(err.Error(), "reads_max_bytes") {
		t.Fatalf("a read over the budget: %v; want busy naming reads_max_bytes", err)
	}
	// Each held answer keeps its 8 MiB; a read is admitted for two copies while it runs.
	if want := int((DefaultReadsMaxBytes - readCopies*length) / length); len(held) != want+1 && len(held) != want {
		t.Errorf("%d answers held before the budget refused; want about %d", len(held), want)
	}
	if _, peak := m.reads.usage(); peak > DefaultReadsMaxBytes {
		t.Errorf("the budget's peak was %d bytes; its total is %d", peak, DefaultReadsMaxBytes)
	}
	// A console look is refused the same way.
	if _, err := m.LookFile(t.Context(), "a", id, "big", 0, length); errclass.Of(err) != errclass.Busy {
		t.Errorf("a look over the budget: %v; want busy", err)
	}
	for _, got := range held {
		got.Done()
		got.Done() // twice is harmless
	}
	if h, _ := m.reads.usage(); h != 0 {
		t.Errorf("%d bytes still held after every answer was done", h)
	}
	got, err := m.ReadFile(t.Context(), "a", id, "big", 0, length)
	if err != nil {
		t.Fatalf("a read once the budget is free: %v", err)
	}
	got.Done()
}

// TestOneAgentsReadsLeaveTheBudgetToOthers: one agent's answers that are never written (8
// downloads of 32 MiB the client never reads) held the whole of reads_max_bytes, and every
// other agent's 5-byte read was refused (issue 51, 2). An agent holds at most its share now:
// its own next read is refused busy naming the share, and another agent's read is served.
func TestOneAgentsReadsLeaveTheBudgetToOthers(t *testing.T) {
	box := &readBox{fakeBox: newFakeBox(), buf: make([]byte, MaxReadBytes)}
	m, alice := newReads(t, box) // agent "a"
	m.reads.wait = 100 * time.Millisecond
	bob, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var held []sandbox.FileContent
	defer func() {
		for _, got := range held {
			got.Done()
		}
	}()
	// a's answers, each smaller than the last once one is refused, to the last byte it may hold.
	var refused error
	for length := int64(MaxReadBytes); length > 0; {
		got, err := m.ReadFile(t.Context(), "a", alice, "big", 0, length)
		if err != nil {
			if refused == nil {
				refused = err
			}
			length /= 2
			continue
		}
		held = append(held, got)
	}
	if errclass.Of(refused) != errclass.Busy || !strings.Contains(refused.Error(), "share") || !strings.Contains(refused.Error(), `"a"`) {
		t.Errorf("a's first read past its share: %v; want busy naming its share", refused)
	}
	got, err := m.ReadFile(t.Context(), "b", bob.ID, "small", 0, 5)
	if err != nil {
		t.Fatalf("b's 5-byte read while a holds its answers: %v", err)
	}
	got.Done()
}

// TestReadBudgetConcurrent: many concurrent reads, each holding its answer until all have
// answered, never take the budget past its total; those it has no room for are refused busy.
func TestReadBudgetConcurrent(t *testing.T) {
	box := &readBox{fakeBox: newFakeBox(), buf: make([]byte, MaxReadBytes)}
	m, id := newReads(t, box)
	m.reads.wait = 100 * time.Millisecond // each refused read waits this long, one after another
	const reads, length = 48, 8 << 20
	var (
		wg      sync.WaitGroup
		answers sync.WaitGroup
		hold    = make(chan struct{})
		ok      atomic.Int32
		busy    atomic.Int32
	)
	answers.Add(reads)
	for range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := m.ReadFile(t.Context(), "a", id, "big", 0, length)
			// Counted before answers.Done, so the counts are whole when answers.Wait returns.
			switch {
			case err == nil:
				ok.Add(1)
			case errclass.Of(err) == errclass.Busy:
				busy.Add(1)
			default:
				t.Errorf("a read: %v", err)
			}
			answers.Done()
			if err == nil {
				<-hold // an answer still being written
				got.Done()
			}
		}()
	}
	answers.Wait()
	held, peak := m.reads.usage()
	if peak > m.reads.total || held > m.reads.total {
		t.Errorf("the budget held %d bytes at most (%d now); its total is %d", peak, held, m.reads.total)
	}
	if int64(ok.Load())*length != held || ok.Load()+busy.Load() != reads || busy.Load() == 0 {
		t.Errorf("%d reads answered, %d refused busy, %d bytes held", ok.Load(), busy.Load(), held)
	}
	close(hold)
	wg.Wait()
	if held, _ := m.reads.usage(); held != 0 {
		t.Errorf("%d bytes still held after every answer was done", held)
	}
}
