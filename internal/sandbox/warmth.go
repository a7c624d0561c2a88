package sandbox

// Warmth is how warm a runtime's slots are: how many are up, and how many start runs as forks
// of a fork server that has imported the preload (the rest start a fresh interpreter, seconds
// slower with the default preload). A new daemon is ready (one slot up) well before its runs
// fork.
type Warmth struct {
	// Slots is the pool's size; Up how many slots' sandboxes are up; Fork how many of those
	// start runs as forks now.
	Slots, Up, Fork int
	// ForkOff says why no run will start as a fork (fork_server false, a preload that starts
	// threads, ...); "" when they may.
	ForkOff string
	// Sessions is how many warm session sandboxes are ready to claim now, each with its
	// executor started (warm_sessions; a session's creation, resume or fork takes one).
	Sessions int
}

// Warm reports whether every slot is up and starts runs as forks, or will never fork.
func (w Warmth) Warm() bool { return w.Up == w.Slots && (w.Fork == w.Slots || w.ForkOff != "") }

// Warmer is a Runtime that says how warm its slots are.
type Warmer interface {
	Warmth() Warmth
}
