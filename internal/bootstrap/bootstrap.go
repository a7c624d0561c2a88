// Package bootstrap holds the fixed Python program that runs user code inside the sandbox.
//
// The executor starts `python3 -u -I -X utf8 bootstrap.py` as the slot's uid with file
// descriptor 3 connected to it (a socketpair: the run's capability). Over descriptor 3, as
// newline-delimited JSON, the executor sends one Init line; the bootstrap applies the run's
// rlimits, sets INPUT, writes the code to main.py in the run's directory and executes it as
// module __main__ from there (so tracebacks show the user's own line numbers, and
// multiprocessing's spawn finds the script). Back over descriptor 3 go the program's agent.*
// calls, the text of OUTPUT (read once non-daemon threads are joined and atexit handlers have
// run, in pieces whose size the executor measures), and a mark when a MemoryError ended the
// program or a thread; nothing sent there decides the run's outcome by itself. With the init
// line's "charts", matplotlib's figures (at each plt.show() and, still open, at the end) and
// PIL images shown are saved as figure-N.png and image-N.png in the run's directory, where the
// executor collects them as output files; a figure shown is also a display, its image/png with
// its chart as data (e2b/chart, E2B's shape, read from matplotlib's objects). sys.stdout and
// sys.stderr wait, when a write follows one to the other stream, until the executor has read
// the other's pipe, so that their order is kept. No request value is ever pasted into Python
// source.
//
// An init line with "session" set starts a session's interpreter instead: it runs call after
// call in one module __main__ (globals, imports and the working directory persist), reading
// each call's init line, answering with the call's OUTPUT and a "done" report; between calls
// it ignores SIGINT, which the executor sends to interrupt a call past its timeout.
package bootstrap

import _ "embed"

// Source is the text of bootstrap.py.
//
//go:embed bootstrap.py
var Source []byte

// Checker is the text of deps.py, the dependency checker the executor runs as the installer
// user: which requirements the image or an installed directory already satisfies.
//
//go:embed deps.py
var Checker []byte

// ForkServer is the text of forkserver.py, the fork server the executor keeps: a root Python
// process that imports the preloaded modules once and forks each run's process from itself.
//
//go:embed forkserver.py
var ForkServer []byte

// FileName is the name tracebacks give the user's code.
const FileName = "main.py"
