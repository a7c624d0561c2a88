package docker

import (
	"slices"
	"testing"
)

// Under runsc the container has room for what gVisor itself takes (the memory reserve the
// executor keeps free, the Sentry's host threads) and the executor knows it runs in gVisor;
// under runc the box's limits are the container's, and the executor is told nothing.
func TestRunscBoxHasRoomForGVisor(t *testing.T) {
	box := Box{MemoryBytes: 512 << 20, MemorySwapBytes: 512 << 20, PidsLimit: 512, TmpBytes: 1 << 20, RunDirBytes: 1 << 20}
	for _, c := range []struct {
		runtime             string
		memory, swap, pids  int64
		executorFlagsGVisor bool
	}{
		{"", 512 << 20, 512 << 20, 512, false},
		{"runsc", 512<<20 + RunscMemoryReserve, 512<<20 + RunscMemoryReserve, 512 * RunscPidsFactor, true},
	} {
		b := box
		b.Runtime = c.runtime
		_, host, _ := b.spec(Image{Tag: "x"}, "/data", 0)
		if host.Memory != c.memory || host.MemorySwap != c.swap || host.PidsLimit == nil || *host.PidsLimit != c.pids {
			t.Errorf("runtime %q: memory %d, swap %d, pids %v; want %d, %d, %d", c.runtime, host.Memory, host.MemorySwap, host.PidsLimit, c.memory, c.swap, c.pids)
		}
		r := &Runtime{cfg: Config{Box: b}}
		if got := slices.Contains(r.executorCommand(0), "runsc"); got != c.executorFlagsGVisor {
			t.Errorf("runtime %q: executor command %q", c.runtime, r.executorCommand(0))
		}
	}
}
