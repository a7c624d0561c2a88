package e2b

import (
	"context"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Warmer starts warm sessions and hands them to agents (engine.Sessions; see its warm.go).
type Warmer interface {
	CreateWarm(ctx context.Context, req sandbox.SessionRequest, code string) (sandbox.SessionInfo, error)
	Adopt(ctx context.Context, id, agent string) (sandbox.SessionInfo, error)
	CloseWarm(ctx context.Context, id string) (sandbox.SessionInfo, error)
}

// warmCode is a warm session's first call: it starts the interpreter, whose preload the fork
// server's modules and IPython's formatter come with.
const warmCode = "pass"

// poolRetry is how long the filler waits after a warm session could not be made (the
// sessions' caps are reached, the engine is not ready).
const poolRetry = 5 * time.Second

// Fill keeps Config.Pool warm sessions ready until ctx is done, making one whenever one was
// taken; it returns when ctx is done. Without a pool it returns at once.
func (s *Server) Fill(ctx context.Context) {
	if s.cfg.Pool <= 0 || s.warmer == nil {
		return
	}
	life := s.cfg.MaxLifetime.Milliseconds()
	for {
		for len(s.pool) < s.cfg.Pool {
			info, err := s.warmer.CreateWarm(ctx, sessionRequest("", life), warmCode)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Debug("making a warm e2b sandbox; trying again", "error", err, "retry", poolRetry)
				break
			}
			s.pool <- warmSession{id: info.ID, made: time.Now()}
		}
		select {
		case <-ctx.Done():
			s.drain()
			return
		case <-s.taken:
		case <-time.After(poolRetry):
		}
	}
}

// warmSession is a session of the pool.
type warmSession struct {
	id   string
	made time.Time
}

// fromPool hands a warm session to agent, or returns "" when there is none ready (or agent is
// at its cap: the cold path then answers why).
func (s *Server) fromPool(ctx context.Context, agent string) (sandbox.SessionInfo, bool) {
	if s.cfg.Pool <= 0 || s.warmer == nil {
		return sandbox.SessionInfo{}, false
	}
	for {
		var w warmSession
		select {
		case w = <-s.pool:
		default:
			return sandbox.SessionInfo{}, false
		}
		select {
		case s.taken <- struct{}{}:
		default:
		}
		info, err := s.warmer.Adopt(ctx, w.id, agent)
		if err == nil {
			return info, true
		}
		if statusOf(err) == 429 { // agent at its cap: keep the warm one for another
			s.pool <- w
			return sandbox.SessionInfo{}, false
		}
		s.log.Debug("a warm e2b sandbox could not be handed on; trying the next", "session", w.id, "error", err)
	}
}

// drain ends the pool's sessions (the engine ends them too when it stops).
func (s *Server) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		select {
		case w := <-s.pool:
			if _, err := s.warmer.CloseWarm(ctx, w.id); err != nil {
				s.log.Warn("ending a warm e2b sandbox", "session", w.id, "error", err)
			}
		default:
			return
		}
	}
}

// Warm returns how many warm sandboxes are ready now.
func (s *Server) Warm() int { return len(s.pool) }
