package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
)

// box is a daemon's warm containers (one per slot), reached through the Docker Engine API:
// what `docker exec` and `docker stats` do, without the docker CLI. The baselines run in the
// first; memory and CPU are the sums over all.
type box struct {
	api client.APIClient
	ids []string
}

// id is the container the baselines and the executor's figures come from: slot 0's.
func (b *box) id() string { return b.ids[0] }

// execOutput is what an exec printed and its exit code.
type execOutput struct {
	stdout, stderr []byte
	exitCode       int
}

// exec runs argv in the container as the container's user (root), the way `docker exec` does:
// it creates the exec, attaches to it (which starts it), reads its output to the end and
// inspects it for the exit code.
func (b *box) exec(ctx context.Context, argv []string) (execOutput, error) {
	created, err := b.api.ExecCreate(ctx, b.id(), client.ExecCreateOptions{AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		return execOutput{}, fmt.Errorf("creating an exec of %s: %w", argv[0], err)
	}
	att, err := b.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return execOutput{}, fmt.Errorf("starting an exec of %s: %w", argv[0], err)
	}
	stop := context.AfterFunc(ctx, att.Close) // the hijacked connection does not watch ctx
	var out execOutput
	var stdout, stderr bytes.Buffer
	_, err = stdcopy.StdCopy(&stdout, &stderr, att.Reader)
	stop()
	att.Close()
	if ctx.Err() != nil {
		return execOutput{}, context.Cause(ctx)
	}
	if err != nil {
		return execOutput{}, fmt.Errorf("reading the output of %s: %w", argv[0], err)
	}
	out.stdout, out.stderr = stdout.Bytes(), stderr.Bytes()
	// The engine may still be recording the exit for a moment after the stream ended.
	for i := 0; ; i++ {
		ins, err := b.api.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
		if err != nil {
			return execOutput{}, fmt.Errorf("inspecting the exec of %s: %w", argv[0], err)
		}
		if !ins.Running {
			out.exitCode = ins.ExitCode
			return out, nil
		}
		if i == 200 {
			return execOutput{}, fmt.Errorf("the exec of %s still runs after its output ended", argv[0])
		}
		select {
		case <-ctx.Done():
			return execOutput{}, context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// run is exec that fails unless the command exits 0; the error quotes its stderr.
func (b *box) run(ctx context.Context, argv []string) ([]byte, error) {
	out, err := b.exec(ctx, argv)
	if err != nil {
		return nil, err
	}
	if out.exitCode != 0 {
		return nil, fmt.Errorf("%s exited with status %d in the container: %s", strings.Join(argv, " "), out.exitCode,
			strings.TrimSpace(string(out.stderr)))
	}
	return out.stdout, nil
}

// dockerExec times n sequential `docker exec`s of python3 -c code (baseline A), each from
// before the exec is created to after its exit code 0 is known.
func (b *box) dockerExec(ctx context.Context, p program, n int) ([]time.Duration, error) {
	durations := make([]time.Duration, 0, n)
	argv := []string{"python3", "-c", p.code}
	for range n {
		t0 := time.Now()
		out, err := b.run(ctx, argv)
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if string(out) != p.stdout {
			return nil, fmt.Errorf("docker exec of python3 -c %q printed %q, want %q", p.code, out, p.stdout)
		}
		durations = append(durations, d)
	}
	return durations, nil
}

// spawnUID is the uid (and gid) the spawn-time baselines run as: nobody, which is no slot's uid,
// so the executor's cleanup of slot processes never touches them.
const spawnUID = 65534

// spawnTime has the executor in the box start python3 -c code n times (baselines B and C) with
// `sandpit-executor spawn-time`, in one exec, and returns the durations it measured: from just
// before each start to after each exit, without the exec's own cost.
func (b *box) spawnTime(ctx context.Context, p program, n int) ([]time.Duration, error) {
	return b.spawnArgv(ctx, []string{"python3", "-c", p.code}, n)
}

// inOwnDirectory is a shell script that runs python3 -c "$0" in a new directory of its own,
// with a copy of the image's matplotlib cache as its MPLCONFIGDIR (as the executor gives a
// cold run), and removes the directory after: for a program that writes files into its
// working directory, which spawn-time's (/) is not.
const inOwnDirectory = `d=$(mktemp -d) || exit 1
cp -R /opt/sandpit/matplotlib "$d/.matplotlib" 2>/dev/null
cd "$d" && MPLCONFIGDIR="$d/.matplotlib" MPLBACKEND=Agg python3 -c "$0"
s=$?; cd / && rm -rf "$d"; exit $s`

// spawnInDirectory is spawnTime for a program that writes files (baseline D): each run
// starts in a new directory of its own (see inOwnDirectory; the shell, mktemp, cp and rm
// add a few milliseconds to each run).
func (b *box) spawnInDirectory(ctx context.Context, p program, n int) ([]time.Duration, error) {
	return b.spawnArgv(ctx, []string{"sh", "-c", inOwnDirectory, p.code}, n)
}

// spawnArgv has the executor in the box start argv n times with `sandpit-executor
// spawn-time` and returns the durations it measured.
func (b *box) spawnArgv(ctx context.Context, argv []string, n int) ([]time.Duration, error) {
	out, err := b.run(ctx, append([]string{docker.ExecutorPath, "spawn-time", "-n", strconv.Itoa(n), "-uid", strconv.Itoa(spawnUID),
		"--"}, argv...))
	if err != nil {
		return nil, err
	}
	return parseSpawnTime(out, n)
}

// parseSpawnTime reads spawn-time's JSON, {"durations_ns": [...]}, which must hold n values.
func parseSpawnTime(out []byte, n int) ([]time.Duration, error) {
	var v struct {
		DurationsNS []int64 `json:"durations_ns"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("reading the output of sandpit-executor spawn-time: %w (got %q)", err, truncate(out, 200))
	}
	if len(v.DurationsNS) != n {
		return nil, fmt.Errorf("sandpit-executor spawn-time reported %d durations, want %d", len(v.DurationsNS), n)
	}
	durations := make([]time.Duration, n)
	for i, ns := range v.DurationsNS {
		durations[i] = time.Duration(ns)
	}
	return durations, nil
}

// stats reads one sample of a container's stats.
func (b *box) stats(ctx context.Context, id string) (container.StatsResponse, error) {
	res, err := b.api.ContainerStats(ctx, id, client.ContainerStatsOptions{})
	if err != nil {
		return container.StatsResponse{}, fmt.Errorf("reading the container's stats: %w", err)
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return container.StatsResponse{}, fmt.Errorf("decoding the container's stats: %w", err)
	}
	return st, nil
}

// memory returns the containers' memory use in bytes as `docker stats` shows it, summed.
func (b *box) memory(ctx context.Context) (int64, error) {
	var sum int64
	for _, id := range b.ids {
		st, err := b.stats(ctx, id)
		if err != nil {
			return 0, err
		}
		sum += memoryUsage(st.MemoryStats)
	}
	return sum, nil
}

// cpuTime returns the CPU time every process of the containers has used since they started.
func (b *box) cpuTime(ctx context.Context) (time.Duration, error) {
	var sum time.Duration
	for _, id := range b.ids {
		st, err := b.stats(ctx, id)
		if err != nil {
			return 0, err
		}
		sum += time.Duration(st.CPUStats.CPUUsage.TotalUsage)
	}
	return sum, nil
}

// memoryUsage is the memory a container uses, in bytes, computed as the docker CLI does: its
// cgroup's usage without the inactive file cache (total_inactive_file on cgroup v1,
// inactive_file on v2), which the kernel reclaims first.
func memoryUsage(m container.MemoryStats) int64 {
	if v, ok := m.Stats["total_inactive_file"]; ok && v < m.Usage {
		return int64(m.Usage - v)
	}
	if v := m.Stats["inactive_file"]; v < m.Usage {
		return int64(m.Usage - v)
	}
	return int64(m.Usage)
}

// executorMemory returns the executor's resident set size and its peak (VmRSS and VmHWM of
// /proc/PID/status in the box), in bytes.
func (b *box) executorMemory(ctx context.Context) (rss, peak int64, err error) {
	out, err := b.run(ctx, []string{"sh", "-c", `exec cat "/proc/$(cat ` + docker.ExecutorPIDFile + `)/status"`})
	if err != nil {
		return 0, 0, fmt.Errorf("reading the executor's memory: %w", err)
	}
	m, err := parseProcStatus(out)
	return m.rss, m.peak, err
}

// procMemory is a process's memory as /proc/PID/status gives it, in bytes.
type procMemory struct {
	rss  int64 // VmRSS: resident now
	peak int64 // VmHWM: resident at its peak
	anon int64 // RssAnon: of rss, anonymous memory (heap, stacks): the process's own
	file int64 // RssFile: of rss, mapped files' pages (its binary's): page cache, shared and reclaimable
}

// parseProcStatus reads VmRSS, VmHWM, RssAnon and RssFile from the text of /proc/PID/status.
// A process without VmRSS (a kernel thread, a zombie) is an error; the others are 0 when
// absent (RssAnon and RssFile: Linux 4.5 and later).
func parseProcStatus(status []byte) (procMemory, error) {
	var m procMemory
	fields := map[string]*int64{"VmRSS": &m.rss, "VmHWM": &m.peak, "RssAnon": &m.anon, "RssFile": &m.file}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			return procMemory{}, fmt.Errorf("unexpected %s line in /proc/PID/status: %q", name, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return procMemory{}, fmt.Errorf("unexpected %s line in /proc/PID/status: %q", name, sc.Text())
		}
		*dst = kb << 10
	}
	if m.rss == 0 {
		return procMemory{}, errors.New("no VmRSS in /proc/PID/status: the process has exited")
	}
	return m, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
