package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// pool hands out the runtime's slots: one execution (or install, or hold) per slot at a time,
// the others waiting in a bounded queue. A freed slot goes to the waiting agent that holds the
// fewest, and one agent's executions in slots plus queued are capped, so an agent with many
// requests cannot keep every slot from another that waits. An agent that holds every slot but
// one takes that last one only for a short run (one that holds its slot for at most
// DefaultTimeout and Grace: no longer timeout, no dependencies to install); its longer runs
// wait for one of its own slots. So one agent never holds every slot with long runs: another
// agent's request waits for a slot at most one short run (see docs/configuration.md,
// executions_per_agent). A released slot is offered again only once the runtime has settled
// it (see sandbox.Settler). It is safe for concurrent use.
type pool struct {
	rt  sandbox.Runtime
	log *slog.Logger
	// up tells whether a slot's sandbox is up now (the runtime's slotHealth; nil when it
	// cannot tell).
	up func(slot int) bool
	// base ends when the Service is interrupted: waiting ends, settling stops.
	base context.Context
	// slots, queueLength and perAgent are Config's Slots, QueueLength and ExecutionsPerAgent.
	slots, queueLength, perAgent int
	// short is the most a run may hold its slot to take an agent's last slot: Config's
	// DefaultTimeout plus Grace.
	short time.Duration

	mu sync.Mutex
	// free are the free slots' numbers; queue the requests waiting for one, in arrival order
	// (a free slot and a waiting request are there together only while that request may not
	// take that slot, see mayTake); held counts each agent's slots ("" for installs, which name
	// no agent).
	free     []int
	queue    []*waiter
	held     map[string]int
	settling sync.WaitGroup // settle's goroutines
}

// waiter is a request waiting for a slot: dispatch sends it one on slot.
type waiter struct {
	agent string
	hold  time.Duration // how long it may hold the slot
	slot  chan int
}

// newPool returns the pool of cfg's slots on rt; each slot is offered once the runtime has it
// ready (a pool of boxes brings its slots up one by one).
func newPool(base context.Context, rt sandbox.Runtime, cfg Config, log *slog.Logger) *pool {
	p := &pool{rt: rt, log: log, base: base, slots: cfg.Slots, queueLength: cfg.QueueLength,
		perAgent: cfg.ExecutionsPerAgent, short: cfg.DefaultTimeout + cfg.Grace, held: map[string]int{}}
	if h, ok := rt.(slotHealth); ok {
		p.up = h.SlotUp
	}
	for i := range cfg.Slots {
		p.settle(i)
	}
	return p
}

// stats returns how many slots are busy and how many requests wait.
func (p *pool) stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Slots: p.slots, Busy: p.slots - len(p.free), Waiting: len(p.queue)}
}

// acquire takes a slot for agent ("" for work that names none) for work that holds it at most
// hold, waiting in the queue when none is free (or when the only one free is one agent may not
// take, see mayTake). Errors: a *sandbox.BusyError when agent already has ExecutionsPerAgent
// executions in slots and queued, or when the queue is full; sandbox.ErrNotReady when the
// Service is interrupted; ctx's error when it ends first.
func (p *pool) acquire(ctx context.Context, agent string, hold time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("waiting for a free slot: %w", err)
	}
	p.mu.Lock()
	if agent != "" && p.perAgent > 0 && p.held[agent]+p.waiting(agent) >= p.perAgent {
		p.mu.Unlock()
		return 0, &sandbox.BusyError{Slots: p.slots, Queue: p.queueLength, RetryAfter: time.Second, Agent: agent, PerAgent: p.perAgent}
	}
	if len(p.free) > 0 && p.mayTake(agent, hold) {
		slot := p.takeFree()
		p.held[agent]++
		p.mu.Unlock()
		return slot, nil
	}
	if len(p.queue) >= p.queueLength {
		p.mu.Unlock()
		return 0, &sandbox.BusyError{Slots: p.slots, Queue: p.queueLength, RetryAfter: time.Second}
	}
	w := &waiter{agent: agent, hold: hold, slot: make(chan int, 1)}
	p.queue = append(p.queue, w)
	p.mu.Unlock()
	select {
	case slot := <-w.slot:
		if ctx.Err() == nil && p.base.Err() == nil {
			return slot, nil
		}
		// Cancelled at the same moment: the slot (unused) goes to the next one.
		p.mu.Lock()
		p.giveBack(agent, slot)
		p.mu.Unlock()
	case <-ctx.Done():
		p.leave(w)
	case <-p.base.Done():
		p.leave(w)
	}
	if p.base.Err() != nil {
		return 0, fmt.Errorf("%w: %w", sandbox.ErrNotReady, ErrInterrupted)
	}
	return 0, fmt.Errorf("waiting for a free slot: %w", ctx.Err())
}

// release gives back agent's slot after a run or an install: it is offered again once the
// runtime has settled it, in the background, so that the result goes out while the slot is
// cleaned.
func (p *pool) release(slot int, agent string) {
	p.mu.Lock()
	p.unhold(agent)
	p.mu.Unlock()
	p.settle(slot)
}

// unused gives back agent's slot that ran nothing (a hold): it is offered again at once.
func (p *pool) unused(slot int, agent string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.giveBack(agent, slot)
}

// settle offers slot once the runtime has settled it.
func (p *pool) settle(slot int) {
	st, ok := p.rt.(sandbox.Settler)
	if !ok {
		p.offer(slot)
		return
	}
	p.settling.Go(func() {
		if err := st.Settle(p.base, slot); err != nil && p.base.Err() == nil {
			p.log.Warn("a slot did not settle after its run; offering it anyway", "slot", slot, "error", err)
		}
		p.offer(slot)
	})
}

// settled waits until every slot released so far has settled (or the Service was
// interrupted).
func (p *pool) settled() { p.settling.Wait() }

// offer makes slot free and hands it to a waiting request, if any.
func (p *pool) offer(slot int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, slot)
	p.dispatch()
}

// takeFree takes the free slot that has been free longest among those whose sandbox is up
// (all of them when none is, or when the runtime cannot tell): its next program has had the
// most time to be forked ahead (a slot just settled may still be forking it), so runs one
// after another go round the slots. p.mu is held; p.free is not empty.
func (p *pool) takeFree() int {
	i := 0
	if p.up != nil {
		// A slot whose sandbox is lost (its node gone, its container killed) would hold the
		// run until it is back (the runtime's ready wait) while another slot is up.
		i = max(0, slices.IndexFunc(p.free, p.up))
	}
	slot := p.free[i]
	p.free = slices.Delete(p.free, i, i+1)
	return slot
}

// slotHealth is a runtime that tells whether a slot's sandbox is up now (the Docker and
// Kubernetes runtimes).
type slotHealth interface {
	SlotUp(slot int) bool
}

// unhold counts agent's slot as given back; p.mu is held.
func (p *pool) unhold(agent string) {
	if p.held[agent]--; p.held[agent] <= 0 {
		delete(p.held, agent)
	}
}

// mayTake reports whether agent may take a free slot for work that holds it at most hold: not
// when that would make it hold every slot (of two or more) with work longer than p.short.
// p.mu is held.
func (p *pool) mayTake(agent string, hold time.Duration) bool {
	return agent == "" || p.slots < 2 || p.held[agent] < p.slots-1 || hold <= p.short
}

// dispatch gives free slots to waiting requests: each to the first waiting request of the
// agents that hold the fewest slots, among those that may take it (mayTake). p.mu is held.
func (p *pool) dispatch() {
	for len(p.free) > 0 {
		pick := -1
		for i, w := range p.queue {
			if p.mayTake(w.agent, w.hold) && (pick < 0 || p.held[w.agent] < p.held[p.queue[pick].agent]) {
				pick = i
			}
		}
		if pick < 0 {
			return
		}
		w := p.queue[pick]
		p.queue = slices.Delete(p.queue, pick, pick+1)
		p.held[w.agent]++
		w.slot <- p.takeFree()
	}
}

// leave takes w out of the queue; when dispatch gave it a slot meanwhile, the slot is offered
// again.
func (p *pool) leave(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.queue, w); i >= 0 {
		p.queue = slices.Delete(p.queue, i, i+1)
		return
	}
	p.giveBack(w.agent, <-w.slot)
}

// giveBack returns an unused slot dispatch gave agent, for the next waiting request; p.mu is
// held.
func (p *pool) giveBack(agent string, slot int) {
	p.unhold(agent)
	p.free = append(p.free, slot)
	p.dispatch()
}

// waiting counts agent's requests in the queue (at most QueueLength); p.mu is held.
func (p *pool) waiting(agent string) int {
	n := 0
	for _, w := range p.queue {
		if w.agent == agent {
			n++
		}
	}
	return n
}
