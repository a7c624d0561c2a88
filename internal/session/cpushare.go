package session

import (
	"context"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// An agent's sessions share one slot's weight of the host's CPU: each of its n live sessions
// weighs sandbox.DefaultCPUWeight/n (a slot's container weighs the whole). Every box keeps its
// own quota (the cpus setting), which caps a box whatever the host has free; the weights decide
// only who gets the CPU when boxes want more than the host has, so one agent's busy sessions
// cannot take the host from another agent's run (a red team's replay: two busy sessions made
// another agent's small run 3× slower). Boxes that cannot be weighed (sandbox.CPUWeigher:
// Kubernetes pods, whose requests set their weight) keep theirs. A box starts at
// sandbox.DefaultCPUWeight, so an agent's lone session is never weighed: the engine's update
// (a runc process on the host) would only compete with its first call.

// minCPUWeight is the least weight a session gets (cgroup v1's cpu.shares floor is 2): an
// agent with more sessions than that divides its share no further.
const minCPUWeight = 2

// shareCPU weighs, in the background, the live sessions of agent ("" is the warm pool's: left
// as they are) after one of them started or ended: a weight is a hint to the kernel's
// scheduler, never worth a request's wait. Shutdown waits for it.
func (r *Registry) shareCPU(agent string) {
	if agent == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closing.Add(1)
	go func() {
		defer r.closing.Done()
		r.weigh(agent)
	}()
}

// weigh gives each live session of agent its weight; a box that cannot be weighed is logged.
func (r *Registry) weigh(agent string) {
	r.cpuMu.Lock()
	defer r.cpuMu.Unlock()
	r.mu.Lock()
	var boxes []weighed
	for _, s := range r.live {
		if s.Agent() != agent {
			continue
		}
		s.mu.Lock()
		if s.cur != nil {
			boxes = append(boxes, weighed{s, s.cur})
		}
		s.mu.Unlock()
	}
	r.mu.Unlock()
	if len(boxes) == 0 {
		return
	}
	weight := max(minCPUWeight, int64(sandbox.DefaultCPUWeight/len(boxes)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range boxes {
		w, ok := b.h.box.(sandbox.CPUWeigher)
		if !ok || b.h.cpuWeight == weight {
			continue
		}
		if err := w.SetCPUWeight(ctx, weight); err != nil {
			// A session that ended or hibernated meanwhile let its box go (the engine then
			// refuses the update of a container being removed): nothing to weigh, no fault.
			if b.s.holds(b.h) {
				r.log.Warn("weighing a session's CPU", "agent", agent, "weight", weight, "error", err)
			}
			continue
		}
		b.h.cpuWeight = weight
	}
}

// weighed is a session and the box it held when weigh looked.
type weighed struct {
	s *Session
	h *held
}

// holds reports whether s still has h as its box.
func (s *Session) holds(h *held) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur == h
}
