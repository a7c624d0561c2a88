package control

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's directory watchers over the line (protocol version 9).

// WatchDir starts watcher id of spec in the session's box (see sandbox.Workspace.WatchDir).
// sink then gets the watcher's events in order, from one goroutine, until stop is called; a
// watcher that ends without stop (the box or the line ended) gets a last call with end set.
// Errors: the executor's refusal (of its class: a path outside the home is invalid, a
// missing one not found), ctx's error, or an error wrapping sandbox.ErrNotReady.
func (c *Line) WatchDir(ctx context.Context, id string, spec sandbox.WatchSpec, sink func(events []sandbox.WatchEvent, end error)) (stop func(), err error) {
	cl, unregister, err := c.register(id)
	if err != nil {
		return nil, err
	}
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindWatch, ID: id, Watch: &spec}); err != nil {
		unregister()
		c.fail(fmt.Errorf("%w: sending a watch: %w", ErrClosed, err))
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	var pending []*protocol.Message
wait:
	for {
		select {
		case <-cl.notify:
			msgs := cl.drain()
			for i, m := range msgs {
				if m.Kind != protocol.KindWatchStarted {
					continue
				}
				if m.Error != "" {
					unregister()
					return nil, remoteError(m)
				}
				pending = msgs[i+1:]
				break wait
			}
		case <-ctx.Done():
			unregister()
			c.unwatchLater(id)
			return nil, ctx.Err()
		case <-c.done:
			unregister()
			return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.Err())
		}
	}
	var stopped atomic.Bool
	stopc := make(chan struct{})
	go func() {
		defer unregister()
		deliver := func(msgs []*protocol.Message) bool {
			for _, m := range msgs {
				if stopped.Load() {
					return true
				}
				switch m.Kind {
				case protocol.KindWatchEvents:
					if len(m.WatchEvents) > 0 {
						sink(m.WatchEvents, nil)
					}
				case protocol.KindWatchEnded:
					if !stopped.Load() {
						sink(nil, errors.New("the session's sandbox stopped watching: "+orText(m.Error, "the watcher ended")))
					}
					return true
				}
			}
			return false
		}
		if deliver(pending) {
			return
		}
		for {
			select {
			case <-cl.notify:
				if deliver(cl.drain()) {
					return
				}
			case <-stopc:
				return
			case <-c.done:
				if deliver(cl.drain()) {
					return
				}
				if !stopped.Load() {
					sink(nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.Err()))
				}
				return
			}
		}
	}()
	return func() {
		if stopped.Swap(true) {
			return
		}
		close(stopc)
		c.unwatchLater(id)
	}, nil
}

// unwatchLater tells the executor to stop watcher id, from a goroutine of its own: stop may
// be called from a sink, and a send must not wait on the line there.
func (c *Line) unwatchLater(id string) {
	go func() { _ = c.conn.Send(&protocol.Message{Kind: protocol.KindUnwatch, ID: id}) }()
}

func orText(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
