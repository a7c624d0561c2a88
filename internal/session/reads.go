package session

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
	// (Config.ReadsMaxBytes): 256 MiB, four reads of the largest size at once.
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
// caller has written the answer (FileContent.Release). Each agent holds at most its share of
// it (a quarter, at least the largest read), so one agent's answers that are never read
// cannot take the room every other agent's reads need.
type readBudget struct {
	sem   *semaphore.Weighted
	total int64         // bytes
	share int64         // the most one agent may hold, bytes
	wait  time.Duration // how long a read waits for room (readWait)

	mu     sync.Mutex
	held   int64 // bytes admitted now, for tests and metrics
	peak   int64
	agents map[string]*agentReads
}

// agentReads is one agent's part of the budget: its share, and the reads that use it.
type agentReads struct {
	sem   *semaphore.Weighted
	users int // reads admitted or waiting; the entry goes at 0
}

func newReadBudget(total int64) *readBudget {
	if total <= 0 {
		total = DefaultReadsMaxBytes
	}
	total = max(total, readCopies*MaxReadBytes) // the largest read must fit
	return &readBudget{sem: semaphore.NewWeighted(total), total: total, share: max(total/4, readCopies*MaxReadBytes),
		wait: readWait, agents: map[string]*agentReads{}}
}

// acquire reserves n bytes of agent's share, waiting at most b.wait (and ctx) for room; else
// an error of class busy that names the share or the budget.
func (b *readBudget) acquire(ctx context.Context, agent string, n int64) error {
	wctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	b.mu.Lock()
	ar := b.agents[agent]
	if ar == nil {
		ar = &agentReads{sem: semaphore.NewWeighted(b.share)}
		b.agents[agent] = ar
	}
	ar.users++
	b.mu.Unlock()
	if err := ar.sem.Acquire(wctx, n); err != nil {
		b.leave(agent, ar, 0)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errclass.Wrap(errclass.Busy, fmt.Errorf(
			"agent %q is holding other file reads, up to its share of %d bytes (a quarter of reads_max_bytes, %d): "+
				"read the answers it has asked for first, retry in a moment, or read the file in smaller ranges (offset, length)",
			agent, b.share, b.total))
	}
	if err := b.sem.Acquire(wctx, n); err != nil {
		b.leave(agent, ar, n)
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

// leave gives back n bytes of agent's share and one use of it.
func (b *readBudget) leave(agent string, ar *agentReads, n int64) {
	if n > 0 {
		ar.sem.Release(n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ar.users--; ar.users == 0 {
		delete(b.agents, agent)
	}
}

// release gives back n of the bytes agent's read holds; last marks its final release.
func (b *readBudget) release(agent string, n int64, last bool) {
	b.mu.Lock()
	ar := b.agents[agent]
	b.held -= max(n, 0)
	b.mu.Unlock()
	if n > 0 {
		b.sem.Release(n)
		ar.sem.Release(n)
	}
	if last {
		b.leave(agent, ar, 0)
	}
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

// read reads op from h's box within the daemon's read budget (agent's share of it), a large read after the
// session's other large reads. The answer's Release frees its bytes in the budget: call it
// once the answer is written.
func (r *Registry) read(ctx context.Context, h *held, agent string, op sandbox.FileRead) (sandbox.FileContent, error) {
	want := readWanted(op.Length)
	if want >= largeRead { // first, so a read waiting its turn holds nothing of the budget
		ws := h.workspace()
		select {
		case ws.largeReads <- struct{}{}:
		case <-ctx.Done():
			return sandbox.FileContent{}, ctx.Err()
		}
		defer func() { <-ws.largeReads }()
	}
	n := readCopies * want
	if err := r.reads.acquire(ctx, agent, n); err != nil {
		return sandbox.FileContent{}, err
	}
	got, err := h.box.ReadFile(ctx, op)
	if err != nil {
		r.reads.release(agent, n, true)
		return got, err
	}
	keep := min(int64(len(got.Content)), n)
	r.reads.release(agent, n-keep, false)
	var once sync.Once
	got.Release = func() { once.Do(func() { r.reads.release(agent, keep, true) }) }
	return got, nil
}
