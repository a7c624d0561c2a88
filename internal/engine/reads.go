package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Bounds of the memory file reads take.
const (
	// DefaultReadsMaxBytes is the default daemon-wide budget of file-read bytes in flight
	// (SessionConfig.ReadsMaxBytes): 256 MiB, four reads of the largest size at once.
	DefaultReadsMaxBytes = 256 << 20
	// readCopies is how many copies of a read's bytes the daemon holds while the box answers
	// (the encoded answer and the decoded bytes); a read is admitted for that many.
	readCopies = 2
	// readWait is how long a read waits for room in the budget before it is refused.
	readWait = 2 * time.Second
	// largeRead is the size from which a session's reads go one at a time: a box holds each
	// read whole (and its encoding) while it answers, so parallel large reads could exhaust
	// its memory and end the session.
	largeRead = 1 << 20
)

// readBudget bounds the file-read bytes the daemon holds at once, over all sessions: a read is
// admitted before it starts for the most it may hold (readCopies times the most it may
// return), shrunk to the bytes it returned once the box answered, and released when its
// caller has written the answer (FileContent.Release).
type readBudget struct {
	sem   *semaphore.Weighted
	total int64 // bytes

	mu   sync.Mutex
	held int64 // bytes admitted now, for tests and metrics
	peak int64
}

func newReadBudget(total int64) *readBudget {
	if total <= 0 {
		total = DefaultReadsMaxBytes
	}
	total = max(total, readCopies*MaxReadBytes) // the largest read must fit
	return &readBudget{sem: semaphore.NewWeighted(total), total: total}
}

// acquire reserves n bytes, waiting at most readWait (and ctx) for room; else an error of class
// busy that names the budget.
func (b *readBudget) acquire(ctx context.Context, n int64) error {
	wctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	if err := b.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errclass.Wrap(errclass.Busy, fmt.Errorf(
			"the daemon is holding other file reads, up to the %d bytes it keeps for them at once (reads_max_bytes); "+
				"retry in a moment, or read the file in smaller ranges (offset, length)", b.total))
	}
	b.mu.Lock()
	b.held += n
	b.peak = max(b.peak, b.held)
	b.mu.Unlock()
	return nil
}

func (b *readBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	b.sem.Release(n)
}

// usage returns the bytes held now and the most held at once.
func (b *readBudget) usage() (held, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.peak
}

// readWanted is the most a read of length bytes (0: to the end) may return.
func readWanted(length int64) int64 {
	if length > 0 && length < MaxReadBytes {
		return length
	}
	return MaxReadBytes
}

// read reads op from ls's box within the daemon's read budget, a large read after the
// session's other large reads. The answer's Release frees its bytes in the budget: call it
// once the answer is written.
func (m *Sessions) read(ctx context.Context, ls *liveSession, op sandbox.FileRead) (sandbox.FileContent, error) {
	want := readWanted(op.Length)
	if want >= largeRead { // first, so a read waiting its turn holds nothing of the budget
		ws := ls.ws()
		select {
		case ws.largeReads <- struct{}{}:
		case <-ctx.Done():
			return sandbox.FileContent{}, ctx.Err()
		}
		defer func() { <-ws.largeReads }()
	}
	n := readCopies * want
	if err := m.reads.acquire(ctx, n); err != nil {
		return sandbox.FileContent{}, err
	}
	got, err := ls.box.ReadFile(ctx, op)
	if err != nil {
		m.reads.release(n)
		return got, err
	}
	keep := min(int64(len(got.Content)), n)
	m.reads.release(n - keep)
	var once sync.Once
	got.Release = func() { once.Do(func() { m.reads.release(keep) }) }
	return got, nil
}
