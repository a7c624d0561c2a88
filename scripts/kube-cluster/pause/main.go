// Command pause stands in for registry.k8s.io/pause in the test cluster, where no registry
// answers: it holds a pod's namespaces, reaps the zombies it inherits as PID 1, and exits 0 on
// SIGINT or SIGTERM. scripts/kube-cluster.sh builds it static and packs it as an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
