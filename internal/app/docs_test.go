package app_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The docs' shell examples that run offline against a daemon: every ```sh block of these
// files, line by line, except the lines docsSkipped names.
// blockAgent finds the agent a block's session belongs to.
var blockAgent = regexp.MustCompile(`/v1/agents/([A-Za-z0-9_.-]+)/sessions/\$S`)

var docsExamples = []string{"README.md", "docs/sessions.md", "docs/ports.md"}

// docsSkipped: the examples' lines (by their start) that the test does not run, and why.
var docsSkipped = map[string]string{
	"make ":                             "builds and tests the project",
	".ci/run":                           "CI itself",
	"SANDPIT_REQUIRE_DOCKER=1 make":     "the whole test suite",
	"export PATH=":                      "the test puts sandpit on PATH",
	"sandpit serve":                     "the test runs the daemon",
	"sandpit image build":               "the test's daemon has its image",
	"sandpit sandbox rm":                "refused while the daemon runs, as the README says",
	"sandpit setup":                     "changes the machine",
	"sandpit doctor":                    "checks the machine (gVisor, PostgreSQL), not the example",
	"sandpit mcp":                       "a server on stdio",
	"sandpit bench":                     "a benchmark",
	"sandpit exec files ex_...":         "an execution's ID is the reader's",
	`curl -s $B/commands -H "$J" -H 'A`: "pip install: the package index is not offline",
}

// docsFixtures are the files the examples name, in the directory they run in.
var docsFixtures = map[string]string{
	"script.py": "print('a file')\n",
	"big.py":    "OUTPUT = INPUT\n",
	"data.json": `{"n": 1}`,
	"plot.py":   "import csv\nprint(len(list(csv.reader(open('sales.csv')))))\n",
	"sales.csv": "month,total\n1,10\n2,12\n",
	"in.csv":    "a,b\n1,2\n",
}

// docsPrelude runs before the examples: a failing command stops them, and so does an answer
// that says a run failed (curl -s alone exits 0 on an error status, and a run that failed is
// a 200): an error status, an "outcome" other than ok, a command's "command not found". A
// GET is retried for a few seconds, as a reader who types the next line gives a background
// server time to listen; a stream (-N) is read for 3 seconds.
const docsPrelude = `set -euo pipefail
answered() {
	jq -e 'if type == "object" then (if has("outcome") then .outcome == "ok" else true end) and
		((.stderr // "") | tostring | test("command not found") | not) else true end' "$1" >/dev/null 2>&1 && return
	if jq -e . "$1" >/dev/null 2>&1; then echo "the answer says the example failed" >&2; return 1; fi
}
curl() {
	local args=(--fail-with-body "$@") i rc out
	out=$(mktemp)
	case " $* " in
	*" -N "*|*" -sN "*) command curl --max-time 3 "${args[@]}" >"$out" || { rc=$?; [ $rc = 28 ] || { cat "$out"; return $rc; }; } ;;
	*" -d "*|*" -X "*|*" --data-binary "*) command curl "${args[@]}" >"$out" || { cat "$out"; return 1; } ;;
	*) for i in $(seq 20); do
		command curl "${args[@]}" >"$out" && break
		[ "$i" = 20 ] && { cat "$out"; return 1; }
		sleep 0.5
	done ;;
	esac
	cat "$out"
	answered "$out"
}
`

// TestDocsShellExamples runs the shell examples of the README and of docs/sessions.md and
// docs/ports.md against a real daemon, with the sandpit CLI on PATH, so that an example that
// fails on a fresh install fails here (issue 48: `git --version` in a command, and no git in
// the image). A block that uses a session ($S) it does not make gets a new one.
func TestDocsShellExamples(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("the docs' examples use jq: apt-get install jq")
	}
	cfg := testConfig(t)
	url, _ := startDaemon(t, cfg)
	host := strings.TrimPrefix(url, "http://")
	bin, work := t.TempDir(), t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "sandpit")); err != nil { // see TestMain
		t.Fatal(err)
	}
	for name, content := range docsFixtures {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	used := map[string]bool{}
	var script strings.Builder
	script.WriteString(docsPrelude)
	for _, file := range docsExamples {
		blocks, err := shellBlocks(filepath.Join("..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if strings.Contains(b.text, "$S") && !strings.Contains(b.text, "S=$(") {
				agent := "alice" // the session's agent is the one the block names
				if m := blockAgent.FindStringSubmatch(b.text); m != nil {
					agent = m[1]
				}
				fmt.Fprintf(&script, "S=$(curl -s -X POST %s/v1/agents/%s/sessions | jq -r .id)\n", host, agent)
			}
			for _, l := range b.lines {
				if skip := docsSkip(l.text); skip != "" {
					used[skip] = true
					continue
				}
				cmd := strings.NewReplacer("localhost:8765", host, "127.0.0.1:8765", host).Replace(l.text)
				fmt.Fprintf(&script, "echo %s >&2\n%s\n", shellQuote(fmt.Sprintf("+ %s:%d: %s", file, l.n, l.text)), cmd)
			}
		}
	}
	for prefix := range docsSkipped {
		if !used[prefix] {
			t.Errorf("docsSkipped names %q, which no example starts with any more: remove it", prefix)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "SANDPIT_URL="+url,
		"SANDPIT_DATA_DIR="+cfg.DataDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the docs' examples: %v; the last lines:\n%s", err, lastLines(string(out), 30))
	}
	t.Logf("the docs' examples ran:\n%s", lastLines(string(out), 200))
}

// docsSkip returns the entry of docsSkipped that line starts with, or "".
func docsSkip(line string) string {
	for prefix := range docsSkipped {
		if strings.HasPrefix(line, prefix) {
			return prefix
		}
	}
	return ""
}

type shellLine struct {
	n    int // its first line in the file
	text string
}

type shellBlock struct {
	text  string
	lines []shellLine // with their continuations joined
}

// shellBlocks returns the ```sh blocks of the Markdown file at path.
func shellBlocks(path string) ([]shellBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks []shellBlock
		cur    *shellBlock
		cont   *shellLine
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			blocks = append(blocks, shellBlock{})
			cur = &blocks[len(blocks)-1]
		case cur != nil && strings.TrimSpace(line) == "```":
			cur, cont = nil, nil
		case cur != nil:
			cur.text += line + "\n"
			if cont != nil {
				cont.text += "\n" + line
			} else {
				cur.lines = append(cur.lines, shellLine{n: n, text: line})
				cont = &cur.lines[len(cur.lines)-1]
			}
			if !strings.HasSuffix(line, "\\") {
				cont = nil
			}
		}
	}
	return blocks, sc.Err()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
