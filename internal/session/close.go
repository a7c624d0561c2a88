package session

import (
	"context"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Close ends the session (reason closed) and removes its sandbox (a hibernated one's file); a
// call running is killed. A resume under way is waited for, and the resumed session closed (a
// DELETE during a resume once answered closed while the resume went on). A session that had
// already ended is returned as it ended.
func (s *Session) Close(ctx context.Context) (sandbox.SessionInfo, error) {
	for {
		s.mu.Lock()
		info, waking := s.info, s.waking
		s.mu.Unlock()
		switch {
		case info.State == sandbox.SessionEnded:
			return info, nil
		case waking != nil:
			select {
			case <-waking:
				continue
			case <-ctx.Done():
				return sandbox.SessionInfo{}, ctx.Err()
			}
		case info.State == sandbox.SessionHibernated:
			release, ok := s.holdHibernated()
			if !ok {
				continue
			}
			ended := s.r.dropHibernated(ctx, s, sandbox.EndClosed, "its client closed it")
			release()
			return ended, nil
		}
		if ended, ok := s.r.end(s, nil, sandbox.EndClosed, "its client closed it"); ok {
			return ended, nil
		}
		// It changed state meanwhile (hibernated, or ended by itself): look again.
		if s.Info().State == info.State {
			return sandbox.SessionInfo{}, fmt.Errorf("%w: session %s could not be closed in its state %s; try again", sandbox.ErrNotReady, s.id, info.State)
		}
	}
}
