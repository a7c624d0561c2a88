package engine

import "context"

// Hold takes an execution slot for work the daemon does for a request besides a run (a large
// schema validation), so that such work is bounded by the slots and the queue as runs are: it
// waits in the queue, and returns a *BusyError when the queue is full. release gives the slot
// back; call it once. The slot counts as agent's, against its executions_per_agent.
func (s *Service) Hold(ctx context.Context, agent string) (release func(), err error) {
	slot, err := s.slots.acquire(ctx, agent, 0) // work of the daemon's: short
	if err != nil {
		return nil, err
	}
	return func() { s.slots.unused(slot, agent) }, nil
}
