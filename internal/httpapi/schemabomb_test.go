package httpapi_test

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
)

// h31Schema is the schema of hostile case H31: anyOf inside anyOf inside anyOf, applied to
// every item (64 failing branches an item).
func h31Schema() string {
	leaf := `[{"type":"string"},{"type":"object"},{"type":"boolean"},{"type":"null"}]`
	l2 := `{"anyOf":[` + strings.TrimSuffix(strings.Repeat(`{"anyOf":`+leaf+`},`, 4), ",") + `]}`
	return `{"type":"array","items":{"anyOf":[` + strings.TrimSuffix(strings.Repeat(l2+",", 4), ",") + `]}}`
}

// zeros is a JSON array of n zeros.
func zeros(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]" }

// heapGrowth runs fn and returns the CPU time the process spent meanwhile (not wall time,
// which a loaded machine stretches) and how far the daemon's Go heap (this
// process's: live and not yet collected objects) rose above where it was before, sampled every
// half millisecond. The Go heap, not the resident memory: under the race detector (make test)
// the detector's shadow memory would be counted too.
func heapGrowth(t *testing.T, fn func()) (time.Duration, int64) {
	t.Helper()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() int64 {
		metrics.Read(sample)
		return int64(sample[0].Value.Uint64())
	}
	before := read()
	peak := make(chan int64)
	stop := make(chan struct{})
	go func() {
		most := before
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		for {
			most = max(most, read())
			select {
			case <-stop:
				peak <- most
				return
			case <-tick.C:
			}
		}
	}()
	cpu := cpuTime(t)
	fn()
	took := cpuTime(t) - cpu
	close(stop)
	return took, <-peak - before
}

// cpuTime returns the CPU time the process has used (user and system).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// H31: saved code whose input schema is the schema bomb, run with 40 000 zeros and with the
// largest input max_input_bytes allows, is refused with a 400 naming the validation budget
// within a second, and the daemon's heap grows by less than 50 MiB; a larger input, up to
// what the body limit lets in, is a 413 naming the input's limit before any schema is
// looked at; nothing runs. The same schema as the output schema ends the run
// output_invalid, as bounded.
func TestSchemaBombIsBounded(t *testing.T) {
	s := newStack(t)
	if st, v := s.call(t, "POST", "/v1/agents/a/code", `{"name": "bomb", "code": "x", "input_schema": `+h31Schema()+`}`); st != 201 {
		t.Fatalf("save: %d %v", st, v)
	}
	// "0," per zero: the largest input max_input_bytes allows, and the largest body.
	cfg := engine.DefaultConfig()
	largest := cfg.MaxInputBytes/2 - 1
	overInput := (cfg.MaxCodeBytes+cfg.MaxInputBytes+64<<10)/2 - 64
	body := `{"input": ` + zeros(overInput) + `}`
	var over map[string]any
	took, grew := heapGrowth(t, func() {
		if st, v := s.call(t, "POST", "/v1/agents/a/code/bomb/run", body); st != 413 || v["error"].(map[string]any)["field"] != "input" {
			t.Errorf("%d zeros: %d %v; want a 413 naming input's limit", overInput, st, v)
		} else {
			over = v
		}
	})
	if over != nil && (took > time.Second*raceSlowdown || grew > 50<<20) {
		t.Fatalf("%d zeros: the 413 took %v of CPU and %d MiB more heap", overInput, took, grew>>20)
	}
	for _, n := range []int{40_000, largest} {
		body := `{"input": ` + zeros(n) + `}`
		var st int
		var v map[string]any
		took, bytes := heapGrowth(t, func() { st, v = s.call(t, "POST", "/v1/agents/a/code/bomb/run", body) })
		if st != 400 || v["error"].(map[string]any)["field"] != "input" || !strings.Contains(v["error"].(map[string]any)["message"].(string), "validation budget") {
			t.Fatalf("%d zeros: %d %v; want a 400 naming the validation budget", n, st, v)
		}
		if took > time.Second*raceSlowdown || bytes > 50<<20 {
			t.Fatalf("%d zeros (%d bytes of body): the 400 took %v of CPU and %d MiB more heap; want under 1s and 50 MiB", n, len(body), took, bytes>>20)
		}
		t.Logf("%d zeros (%d KiB of body): 400 in %v of CPU, heap +%d MiB", n, len(body)>>10, took, bytes>>20)
	}
	if s.rt.runs.Load() != 0 {
		t.Fatal("the code ran")
	}

	// The output side: the fake runtime returns input.out as OUTPUT, up to the input's limit
	// (1 MiB, the default OUTPUT limit too).
	if st, v := s.call(t, "POST", "/v1/agents/a/code", `{"name": "bombout", "code": "x", "output_schema": `+h31Schema()+`}`); st != 201 {
		t.Fatalf("save: %d %v", st, v)
	}
	for _, n := range []int{40_000, cfg.MaxInputBytes/2 - 16} {
		body := `{"input": {"out": ` + zeros(n) + `}}`
		var st int
		var v map[string]any
		// CPU time: the whole run's request (the ledger, the answer) is timed, on a machine that
		// may be busy with other work.
		cpu := cpuTime(t)
		_, bytes := heapGrowth(t, func() { st, v = s.call(t, "POST", "/v1/agents/a/code/bombout/run", body) })
		took := cpuTime(t) - cpu
		if st != 200 || v["outcome"] != "output_invalid" || !strings.Contains(v["reason"].(string), "validation budget") {
			t.Fatalf("OUTPUT of %d zeros: %d %v; want output_invalid naming the validation budget", n, st, v)
		}
		if took > time.Second*raceSlowdown || bytes > 50<<20 {
			t.Fatalf("OUTPUT of %d zeros: took %v of CPU and %d MiB more heap; want under 1s and 50 MiB", n, took, bytes>>20)
		}
		t.Logf("OUTPUT of %d zeros: output_invalid in %v of CPU, heap +%d MiB", n, took, bytes>>20)
	}
}

// The budget itself is safe: the largest inputs it lets through, all failing in the shapes that
// make the most failures per unit of work, are answered within a second of CPU time with less
// than 50 MiB more heap.
func TestValidationAtTheBudget(t *testing.T) {
	s := newStack(t)
	leaf := `[{"type":"string"},{"type":"object"},{"type":"boolean"},{"type":"null"}]`
	for i, c := range []struct {
		schema string
		start  int // a number of zeros over the budget, stepped down until one fits
	}{
		{`{"type":"array","items":{"type":"string"}}`, 110_000},
		{`{"type":"array","items":{"anyOf":` + leaf + `}}`, 27_000},
		{`{"type":"array","items":{"anyOf":[{"anyOf":` + leaf + `},{"anyOf":` + leaf + `}]}}`, 11_000},
	} {
		name := fmt.Sprintf("c%d", i)
		if st, v := s.call(t, "POST", "/v1/agents/a/code", `{"name": "`+name+`", "code": "x", "input_schema": `+c.schema+`}`); st != 201 {
			t.Fatalf("save: %d %v", st, v)
		}
		overBudget := true
		for n := c.start; overBudget; n = n * 97 / 100 {
			body := `{"input": ` + zeros(n) + `}`
			var st int
			var v map[string]any
			// CPU time, not wall-clock time: the machine may be busy with other work.
			cpu := cpuTime(t)
			_, grown := heapGrowth(t, func() { st, v = s.call(t, "POST", "/v1/agents/a/code/"+name+"/run", body) })
			took := cpuTime(t) - cpu
			if st != 400 {
				t.Fatalf("%d zeros: %d %v", n, st, v)
			}
			overBudget = strings.Contains(v["error"].(map[string]any)["message"].(string), "validation budget")
			if n == c.start && !overBudget {
				t.Fatalf("%d zeros is within the budget; start the search higher", n)
			}
			if !overBudget && (v["error"].(map[string]any)["code"] != "invalid_input" || took > time.Second*raceSlowdown || grown > 50<<20) {
				t.Fatalf("%d zeros, the most the budget allows: %v, %v, +%d MiB; want invalid_input within a second of CPU and 50 MiB", n, v, took, grown>>20)
			}
			if !overBudget {
				t.Logf("%s, %d zeros: checked in %v of CPU, heap +%d MiB", c.schema, n, took, grown>>20)
			}
		}
	}
}
