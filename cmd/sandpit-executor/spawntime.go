package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// spawnTimeUsage is the usage line of the spawn-time subcommand.
const spawnTimeUsage = "usage: sandpit-executor spawn-time -n N -uid UID -- ARGV...  (used by sandpit bench)"

// maxSpawns bounds -n.
const maxSpawns = 100_000

// spawnTimeArgs are spawn-time's parsed arguments.
type spawnTimeArgs struct {
	n    int      // how many times to start argv
	uid  int      // the uid and gid to run it as
	argv []string // the program and its arguments
}

// parseSpawnTime parses `-n N -uid UID -- ARGV...`.
func parseSpawnTime(args []string, stderr io.Writer) (spawnTimeArgs, error) {
	var a spawnTimeArgs
	fs := flag.NewFlagSet("spawn-time", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&a.n, "n", 1, "how many times to start ARGV, one after the other")
	fs.IntVar(&a.uid, "uid", 0, "uid and gid to run ARGV as (not 0)")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	a.argv = fs.Args()
	switch {
	case len(a.argv) == 0:
		return a, errors.New("no program to start: give it after --")
	case a.n < 1 || a.n > maxSpawns:
		return a, fmt.Errorf("-n %d is out of range: give 1 to %d", a.n, maxSpawns)
	case a.uid < 1:
		return a, fmt.Errorf("-uid %d: give the uid of an unprivileged user, such as 65534 (nobody)", a.uid)
	}
	return a, nil
}

// spawnEnv is the minimal environment of each spawned program.
func spawnEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
		"HOME=/tmp",
		"OPENBLAS_NUM_THREADS=1",
	}
}

// spawnTime implements `sandpit-executor spawn-time -n N -uid UID -- ARGV...`: it starts ARGV N
// times, one after the other, as uid and gid UID with no supplementary groups, a minimal
// environment, stdin /dev/null and stdout and stderr into a buffer, and times each from just
// before its start to after its exit. It prints {"durations_ns": [...]} (nanoseconds) on
// stdout and returns 0; when a run exits non-zero it prints that run's stderr and returns 1;
// a usage mistake returns 2. sandpit bench uses it for the cost of starting a process in the
// box without HTTP, a session or the exec around it.
func spawnTime(args []string, stdout, stderr io.Writer) int {
	a, err := parseSpawnTime(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "sandpit-executor spawn-time: %v\n%s\n", err, spawnTimeUsage)
		}
		return 2
	}
	path, err := exec.LookPath(a.argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "sandpit-executor spawn-time: %v\n", err)
		return 1
	}
	durations := make([]int64, 0, a.n)
	env := spawnEnv()
	var out, errOut bytes.Buffer
	for i := range a.n {
		out.Reset()
		errOut.Reset()
		cmd := &exec.Cmd{
			Path:   path,
			Args:   a.argv,
			Env:    env,
			Dir:    "/",
			Stdin:  nil, // /dev/null
			Stdout: &out,
			Stderr: &errOut,
			SysProcAttr: &syscall.SysProcAttr{
				Credential: &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.uid), Groups: []uint32{}},
			},
		}
		t0 := time.Now()
		err := cmd.Run() // Start, then Wait: the process's start, its run and its exit
		d := time.Since(t0)
		if err != nil {
			fmt.Fprintf(stderr, "sandpit-executor spawn-time: run %d of %s: %v\n%s\n", i+1, strings.Join(a.argv, " "), err,
				strings.TrimSpace(errOut.String()))
			return 1
		}
		durations = append(durations, d.Nanoseconds())
	}
	if err := json.NewEncoder(stdout).Encode(map[string][]int64{"durations_ns": durations}); err != nil {
		fmt.Fprintf(stderr, "sandpit-executor spawn-time: writing the result: %v\n", err)
		return 1
	}
	return 0
}
