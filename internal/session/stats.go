package session

import (
	"context"
	"errors"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// ErrNoStats says the session's runtime reads no usage of its sandboxes (Kubernetes).
var ErrNoStats = errors.New("this runtime's sandboxes report no usage")

// Stats reads what the session's sandbox uses now (sandbox.StatsReader); ok is false when it
// has no sandbox now (hibernated or ended). Errors: ErrNoStats when its runtime reads none;
// the engine's otherwise.
func (s *Session) Stats(ctx context.Context) (_ sandbox.BoxStats, ok bool, _ error) {
	s.mu.Lock()
	h := s.cur
	s.mu.Unlock()
	if h == nil {
		return sandbox.BoxStats{}, false, nil
	}
	r, ok := h.box.(sandbox.StatsReader)
	if !ok {
		return sandbox.BoxStats{}, false, ErrNoStats
	}
	st, err := r.Stats(ctx)
	return st, err == nil, err
}
