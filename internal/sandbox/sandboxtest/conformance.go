// Package sandboxtest is the conformance suite that every sandbox.Runtime passes: the Docker
// runtime (internal/runtime/docker, under runc and under gVisor's runsc) and the in-process
// pipe runtime (internal/control: the executor over net.Pipe with the host's python3), each
// with runs started cold and forked. Its cases are the runtime's contract (sandbox.Runtime,
// and the optional sandbox.Installer and sandbox.Settler), the hostile and accidental inputs
// of docs/hostile-cases.md that a runtime alone decides (H1–H8, H11–H14, H18–H20, H24, H29,
// H32–H34), concurrent runs attacking each other (H25–H27), the isolation rules, and the runs'
// input and output files (files.go).
//
// The suite is a type, Suite, with one method per case: every exported method of *Suite
// whose name starts with "Test" and whose type is func(*testing.T) is a case, found by
// reflection and run as a subtest named after the method without "Test", in name order. A
// new case is a new method, in any file of this package: it runs its programs through s.rt
// (Exec, Spec), reads what the runtime offers from the Harness fields (skipping when it lacks
// something), and leaves the slots usable for the next case (s.nextRunOK).
package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Harness is what the suite needs from a runtime under test.
type Harness struct {
	// Runtime is the runtime under test, with at least Slots slots, already ready.
	Runtime sandbox.Runtime
	// Slots is how many slots the runtime serves (at least 2).
	Slots int
	// HasModule reports whether the box's python can import a module (numpy for H13,
	// matplotlib for H25, IPython for the notebook cases). The suite asks it again for a
	// module it said was missing, never for one it said was there (see Run).
	HasModule func(name string) bool
	// ReadOnlyRoot is true when the box's root filesystem is read-only (H19).
	ReadOnlyRoot bool
	// SlowWrites is true when every write is a round trip through a user-space kernel (gVisor
	// on its ptrace platform, 100 µs or more a write): the H3 print loop then gets a 128 KiB
	// cap and two minutes (a 1 MiB cap took more than two minutes), the flood of files fewer files.
	SlowWrites bool
	// IsolatedSlots is true when every slot is its own sandbox (network namespace, /tmp,
	// memory): the cases of runs reaching each other's sockets and files then run.
	IsolatedSlots bool
	// Start, when set, is how every run that starts must have been started ("fork" or
	// "cold"): the suite then proves that path, not a fallback. Wait until the runtime's
	// runs start that way before calling Run (see WaitForStart).
	Start sandbox.Start
	// Close, when not nil, closes Runtime for good. The suite calls it once every case has
	// run, and then checks that the closed runtime refuses runs with sandbox.ErrNotReady
	// (see Suite.closedRuntimeRefusesRuns); the caller's own cleanup may close it again.
	Close func() error
}

// Suite is the conformance suite for one runtime: Harness says what the runtime offers, and
// each method named Test… is one case (see the package comment).
type Suite struct {
	Harness
	// rt is Harness.Runtime, wrapped to check Harness.Start.
	rt sandbox.Runtime
}

// Run runs every case of the suite against h, each as a subtest of t, then the closed
// runtime's case when h.Close is set. A method named Test… of the wrong type fails t.
func Run(t *testing.T, h Harness) {
	if h.HasModule != nil {
		h.HasModule = knownModules(h.HasModule)
	}
	s := &Suite{Harness: h, rt: h.Runtime}
	if h.Start != "" {
		s.rt = startChecker{h.Runtime, h.Start}
	}
	for _, c := range s.cases(t) {
		t.Run(c.name, c.run)
	}
	if h.Close != nil {
		t.Run("ClosedRuntimeRefusesRuns", s.closedRuntimeRefusesRuns)
	}
}

// knownModules returns has, remembering the modules it found: an import of one is a whole
// run, which under gVisor started cold costs seconds of CPU (IPython's), and twelve cases ask
// for IPython. A module found missing is asked for again, so that one failed run skips one
// case, not all that need it.
func knownModules(has func(string) bool) func(string) bool {
	var mu sync.Mutex
	found := map[string]bool{}
	return func(name string) bool {
		mu.Lock()
		known := found[name]
		mu.Unlock()
		if known || !has(name) {
			return known
		}
		mu.Lock()
		found[name] = true
		mu.Unlock()
		return true
	}
}

// suiteCase is one case of the suite: a method of *Suite.
type suiteCase struct {
	name string
	run  func(*testing.T)
}

// cases returns the methods of s named Test…, in name order (reflect lists methods sorted),
// named without the prefix.
func (s *Suite) cases(t *testing.T) []suiteCase {
	t.Helper()
	typ, val := reflect.TypeOf(s), reflect.ValueOf(s)
	var cases []suiteCase
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if !strings.HasPrefix(name, "Test") {
			continue
		}
		run, ok := val.Method(i).Interface().(func(*testing.T))
		if !ok {
			t.Errorf("(*Suite).%s is named as a case but has type %s, want func(*testing.T)", name, val.Method(i).Type())
			continue
		}
		cases = append(cases, suiteCase{strings.TrimPrefix(name, "Test"), run})
	}
	if len(cases) == 0 {
		t.Fatal("the suite found no cases: no method of *Suite is named Test…")
	}
	return cases
}

// startChecker is a Runtime whose runs fail with an error when they started another way than
// start.
type startChecker struct {
	sandbox.Runtime
	start sandbox.Start
}

func (c startChecker) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	res, err := c.Runtime.Run(ctx, slot, spec, emit)
	if err == nil && res.Start != "" && res.Start != c.start {
		return res, fmt.Errorf("the run started %q, want %q (outcome %s: %s)", res.Start, c.start, res.Outcome, res.Reason)
	}
	return res, err
}

// WaitForStart runs print(1) in slot 0 until a run starts the way start says ("fork": once
// the fork server is ready), failing the test after timeout.
func WaitForStart(t *testing.T, rt sandbox.Runtime, start sandbox.Start, timeout time.Duration) {
	t.Helper()
	WaitForStartInSlots(t, rt, 1, start, timeout)
}

// WaitForStartInSlots is WaitForStart for each of slots 0 to slots-1: a runtime whose slots
// are sandboxes of their own has a fork server in each.
func WaitForStartInSlots(t *testing.T, rt sandbox.Runtime, slots int, start sandbox.Start, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for slot := range slots {
		for {
			res := Exec(t, rt, slot, Spec("print(1)", 10*time.Second), nil)
			if res.Start == start {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("runs in slot %d still start %q after %s, want %q", slot, res.Start, timeout, start)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Limits are the per-run limits the suite's specs use unless a case says otherwise.
func Limits() sandbox.Limits {
	return sandbox.DefaultLimits()
}

// HeavyImportTimeout is the timeout of a case whose run imports pandas, numpy or matplotlib,
// or makes IPython's shell (every notebook case: a value that is not a scalar, display(), %
// syntax). Such an import reads a thousand files or more, which under gVisor, in a cold box,
// on CI's loaded two cores took over 20 s (CI, 2026-12-02), and IPython's shell 3-6 s in a
// fork of a preload without it; those cases test behaviour, not speed.
const HeavyImportTimeout = 2 * time.Minute

// Spec returns a spec for code with the default limits.
func Spec(code string, timeout time.Duration) sandbox.Spec {
	return sandbox.Spec{ID: sandbox.NewID(), Code: code, Input: json.RawMessage("null"),
		TimeoutMS: timeout.Milliseconds(), Limits: Limits()}
}

// Exec runs spec in slot with an outer deadline of its timeout plus 10 s and fails the test on
// a runtime error.
func Exec(t *testing.T, rt sandbox.Runtime, slot int, spec sandbox.Spec, emit func(sandbox.Event)) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(spec.TimeoutMS)*time.Millisecond+10*time.Second)
	defer cancel()
	res, err := rt.Run(ctx, slot, spec, emit)
	if err != nil {
		t.Fatalf("Run(%q): system error: %v", spec.Code, err)
	}
	return res
}

// nextRunOK checks that print(1) in slot 0 runs, and within 5 s: what a case that stressed
// the slot left behind does not hold up the next run.
func (s *Suite) nextRunOK(t *testing.T) {
	t.Helper()
	start := time.Now()
	res := Exec(t, s.rt, 0, Spec("print(1)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "1\n" {
		t.Fatalf("next run: stdout %q, want %q", res.Stdout, "1\n")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("next run took %s", d)
	}
}

// noOutput reports whether res carries no OUTPUT.
func noOutput(res sandbox.Result) bool {
	return len(res.Output) == 0 || string(res.Output) == "null"
}

// sameJSON reports whether got is the JSON text want, up to insignificant space.
func sameJSON(got json.RawMessage, want string) bool {
	var a, b bytes.Buffer
	return json.Compact(&a, got) == nil && json.Compact(&b, []byte(want)) == nil && a.String() == b.String()
}

// expect fails t unless res ended with outcome, showing what the run said.
func expect(t *testing.T, res sandbox.Result, outcome sandbox.Outcome) {
	t.Helper()
	if res.Outcome != outcome {
		t.Fatalf("outcome = %q (reason %q, exit %d, signal %d), want %q\nstdout: %.500q\nstderr: %.2000q",
			res.Outcome, res.Reason, res.ExitCode, res.Signal, outcome, res.Stdout, res.Stderr)
	}
}
