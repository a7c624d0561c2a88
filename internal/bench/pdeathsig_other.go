//go:build !linux

package bench

import "syscall"

// daemonProcAttr puts the bench's daemon in its own process group (a Ctrl-C reaches the bench,
// which stops it in order). Outside Linux there is no parent-death signal: a bench killed
// outright leaves its daemon to be stopped by hand (the next bench removes its container).
func daemonProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
