// Command sandpit-executor runs inside each sandbox container, one per slot's box. The daemon
// starts it with `docker exec` as root and speaks the session protocol (internal/protocol:
// length-prefixed JSON frames) over its stdin and stdout; its stderr carries its log as JSON
// lines. It exits when stdin ends, killing every run.
//
// Usage: sandpit-executor serve [-slots N] [-uid-base N] [-python PATH] [-bootstrap PATH]
// [-run-root DIR] [-fork-server=false] [-preload MODULES] [-fork-server-max-runs N]
// [-runtime runc|runsc] [-memory-reserve BYTES]
//
// # The path of one run, on this side
//
//	main.go                             flags, then executor.Serve on stdin and stdout
//	internal/executor/executor.go       Serve: prepares the box, greets the daemon; handle and
//	                                    start: a run frame becomes a run on its own goroutine
//	internal/executor/run.go            run.execute: takes the slot's ready program
//	                                    (launch.go: forked by forkserver.go's server, or a cold
//	                                    python3), pumps stdout and stderr (capture.go), serves
//	                                    descriptor 3 (serveControl: agent.* calls, and OUTPUT,
//	                                    checked by output.go),
//	                                    enforces the deadline, kills the slot's uid, classifies
//	internal/bootstrap/bootstrap.py     the run's side: rlimits, INPUT, the code as __main__,
//	                                    OUTPUT when the program ends (forkserver.py forks it)
//
// The daemon's side of the same run is mapped in cmd/sandpit's package comment.
package main
