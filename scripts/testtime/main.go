// Command testtime runs a test binary as go test runs it without -v, and records how long each
// of its tests took. It is CI's instrument (scripts/ci-time.sh), not part of sandpit.
//
// Usage: testtime -p PKG -o FILE [-min SECONDS] BINARY [ARGS...]
//
// It runs BINARY -test.v=test2json ARGS under `go tool test2json`, prints the output of the
// tests that failed (and of those a panic or a timeout left unfinished) and the package's own
// output, which is what the binary prints without -v, and appends to FILE one line per test
// or subtest that passed, failed or was skipped after at least -min seconds:
// "PKG TEST SECONDS ACTION". It exits with the binary's status.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// event is one of test2json's events (go doc cmd/test2json).
type event struct {
	Action  string
	Test    string
	Elapsed float64 // seconds
	Output  string
}

func main() {
	pkg := flag.String("p", "", "the package the binary tests, as the records name it")
	out := flag.String("o", "", "the file the tests' times are appended to")
	least := flag.Float64("min", 10, "record only tests that took at least this many seconds")
	flag.Parse()
	if flag.NArg() == 0 || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: testtime -p PKG -o FILE [-min SECONDS] BINARY [ARGS...]")
		os.Exit(2)
	}
	records, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(2)
	}
	defer records.Close()

	args := append([]string{"tool", "test2json", "-p", *pkg, flag.Arg(0), "-test.v=test2json"}, flag.Args()[1:]...)
	cmd := exec.Command("go", args...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	unfinished := filter(stdout, w, func(e event) {
		if e.Elapsed >= *least {
			fmt.Fprintf(records, "%s %s %.1f %s\n", *pkg, e.Test, e.Elapsed, e.Action)
		}
	})
	status := 0
	if err := cmd.Wait(); err != nil {
		status = 1
		if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() > 0 {
			status = exit.ExitCode()
		}
	}
	if status != 0 {
		for _, lines := range unfinished {
			w.WriteString(lines.String())
		}
	}
	w.Flush()
	os.Exit(status)
}

// result matches the line that ends a test, for its time: test2json leaves Elapsed out of a
// test's event when it runs a binary itself (Go 1.26).
var result = regexp.MustCompile(`^\s*--- (?:PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// filter copies the events' output to w as a binary run without -v prints it: a test's
// output only if it failed, the package's own always. It calls done for each test that ended,
// and returns the output of the tests that never did, by name.
func filter(r io.Reader, w io.Writer, done func(event)) map[string]*strings.Builder {
	held := map[string]*strings.Builder{}
	elapsed := map[string]float64{}
	dec := json.NewDecoder(r)
	for {
		var e event
		if err := dec.Decode(&e); err != nil {
			return held
		}
		if e.Test == "" {
			if e.Action == "output" {
				io.WriteString(w, e.Output)
			}
			continue
		}
		switch e.Action {
		case "output":
			if framing(e.Output) {
				continue
			}
			if m := result.FindStringSubmatch(e.Output); m != nil {
				elapsed[m[1]], _ = strconv.ParseFloat(m[2], 64)
			}
			if held[e.Test] == nil {
				held[e.Test] = &strings.Builder{}
			}
			held[e.Test].WriteString(e.Output)
		case "fail", "pass", "skip":
			if b := held[e.Test]; b != nil && e.Action == "fail" {
				io.WriteString(w, b.String())
			}
			if e.Elapsed == 0 {
				e.Elapsed = elapsed[e.Test]
			}
			delete(held, e.Test)
			delete(elapsed, e.Test)
			done(e)
		}
	}
}

// framing reports whether a line is one that only -v prints.
func framing(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}
