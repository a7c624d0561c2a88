package bench

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
)

// forkFloorScript is forkfloor.py: run in a box, it reads the fork server's memory, then
// imports a preload as the fork server does and times bare forks of itself.
//
//go:embed forkfloor.py
var forkFloorScript string

// bootstrapPath is where the sandbox image has bootstrap.py, which the fork server loads
// before its preload (the fork floor loads it too).
const bootstrapPath = "/opt/sandpit/bootstrap.py"

// SmallPreload is the preload the fork server had before it took every default package's
// modules agents import: the top-level modules of numpy, pandas, matplotlib and scipy. The
// bench compares the default preload with it (VariantSmallPreload, and a fork floor of each).
var SmallPreload = []string{"numpy", "pandas", "matplotlib", "scipy"}

// forkFloorOutput is forkfloor.py's JSON.
type forkFloorOutput struct {
	Server *ServerMemory `json:"server"`
	Probe  struct {
		Preloaded []string          `json:"preloaded"`
		Skipped   map[string]string `json:"skipped"`
		ImportMS  float64           `json:"import_ms"`
		RSS       int64             `json:"rss_bytes"`
		PSS       int64             `json:"pss_bytes"`
		Anon      int64             `json:"anon_bytes"`
		Mappings  int               `json:"mappings"`
		HugeBytes int64             `json:"huge_bytes"`
	} `json:"probe"`
	Forks        int     `json:"forks"`
	ForkCPUNS    int64   `json:"fork_cpu_ns"`
	CPUSource    string  `json:"cpu_source"`
	ForkRusageNS int64   `json:"fork_rusage_ns"`
	ForkWallNS   []int64 `json:"fork_wall_ns"`
}

// forkFloor runs forkfloor.py in slot 0's box with modules as the preload and n forks, and
// returns what it measured, labelled; and the box's fork server's memory as the script found
// it before its own imports (nil when it found none).
func (b *box) forkFloor(ctx context.Context, label string, modules []string, n int) (ForkFloor, *ServerMemory, error) {
	argv := append([]string{"python3", "-u", "-I", "-X", "utf8", "-c", forkFloorScript,
		docker.ExecutorPIDFile, bootstrapPath, strconv.Itoa(n)}, modules...)
	out, err := b.run(ctx, argv)
	if err != nil {
		return ForkFloor{}, nil, fmt.Errorf("the fork floor of %s: %w", label, err)
	}
	return parseForkFloor(out, label, modules)
}

// parseForkFloor reads forkfloor.py's output into a ForkFloor.
func parseForkFloor(out []byte, label string, modules []string) (ForkFloor, *ServerMemory, error) {
	var v forkFloorOutput
	if err := json.Unmarshal(out, &v); err != nil {
		return ForkFloor{}, nil, fmt.Errorf("reading the fork floor's output: %w (got %q)", err, truncate(out, 200))
	}
	if v.Forks < 1 || len(v.ForkWallNS) != v.Forks {
		return ForkFloor{}, nil, fmt.Errorf("the fork floor reported %d forks and %d durations", v.Forks, len(v.ForkWallNS))
	}
	walls := make([]time.Duration, len(v.ForkWallNS))
	for i, ns := range v.ForkWallNS {
		walls[i] = time.Duration(ns)
	}
	perFork := func(ns int64) float64 { return round(float64(ns)/float64(v.Forks)/1e6, 2) }
	f := ForkFloor{Label: label, Modules: slices.Clip(modules), Preloaded: v.Probe.Preloaded, Skipped: v.Probe.Skipped,
		ImportMS: v.Probe.ImportMS, RSS: v.Probe.RSS, PSS: v.Probe.PSS, Anon: v.Probe.Anon, Mappings: v.Probe.Mappings, Huge: v.Probe.HugeBytes,
		Forks: v.Forks, CPUMSPerFork: perFork(v.ForkCPUNS), CPUSource: v.CPUSource, RusageMSPerFork: perFork(v.ForkRusageNS),
		WallP50MS: ms(Summarize(walls).P50)}
	if len(f.Skipped) == 0 {
		f.Skipped = nil
	}
	return f, v.Server, nil
}
