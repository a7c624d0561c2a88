package bench

import "syscall"

// daemonProcAttr puts the bench's daemon in its own process group (a Ctrl-C reaches the bench,
// which stops it in order) and has the kernel send it SIGTERM if the bench dies first, so a
// bench killed outright does not leave its daemon running.
func daemonProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
