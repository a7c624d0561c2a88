package secrets

import (
	"context"
	"net"
	"sync"
)

// MaxUses caps the uses a Run keeps; later ones are counted in Dropped.
const MaxUses = 256

// Run is one run's secrets on the egress proxy: an egress.Wrapper that hands connections to
// the hosts its secrets bind to the Injector, and keeps the record of each use. Safe for
// concurrent use.
type Run struct {
	inj   *Injector
	bound []Bound

	mu      sync.Mutex
	uses    []Use
	dropped int
}

// ForRun returns the Run of the secrets bound (resolved for the run's agent: Keeper.Resolve).
func (in *Injector) ForRun(bound []Bound) *Run { return &Run{inj: in, bound: bound} }

// Wrap is egress.Wrapper's: c itself for a host no secret binds.
func (r *Run) Wrap(ctx context.Context, c net.Conn, host string) net.Conn {
	return r.inj.Wrap(ctx, c, host, r.bound, r.record)
}

func (r *Run) record(u Use) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.uses) >= MaxUses {
		r.dropped++
		return
	}
	u.Host = clip(u.Host, 256)
	r.uses = append(r.uses, u)
}

// Uses returns the uses so far, in order, and how many were left out past MaxUses.
func (r *Run) Uses() ([]Use, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Use(nil), r.uses...), r.dropped
}

// Take returns the uses since the last Take, in order, and how many of them were left out
// past MaxUses, and forgets them: a session's secrets outlive each call that logs them.
func (r *Run) Take() ([]Use, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	uses, dropped := r.uses, r.dropped
	r.uses, r.dropped = nil, 0
	return uses, dropped
}
