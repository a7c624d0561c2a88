package store

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/pgtest"
)

// BenchmarkLedgerWrites records runs (Begin and Finish, two write transactions each) from 4
// goroutines on a 2-core machine (2 per core), on each backend; ledger-writes/s counts the transactions.
func BenchmarkLedgerWrites(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			var s *Store
			var err error
			if backend == "postgres" {
				s, err = OpenPostgres(b.Context(), pgtest.URL(b), 8, nil)
			} else {
				s, err = Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetParallelism(2) // 4 goroutines on 2 cores
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: time.Now(), Origin: sandbox.Origin{Source: "api"}}
					if err := s.Begin(b.Context(), sandbox.Spec{ID: head.ID, Code: "print(1)", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
						b.Error(err)
						return
					}
					head.Outcome, head.Stdout, head.DurationMS = sandbox.OutcomeOK, "1\n", 3
					if err := s.Finish(b.Context(), head); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(2*b.N)/time.Since(start).Seconds(), "ledger-writes/s")
		})
	}
}

// BenchmarkPruneByBytes prunes a SQLite ledger of n records of 4 KiB of stdout each, kept at
// its byte budget: each iteration writes 200 more (not timed) and prunes; a prune that passes
// the budget deletes the oldest down to LedgerLowWater (a tenth of the budget at least).
// ns/deleted should not grow with n. The "under" cases prune a ledger under its budget: the
// sum of execution_bytes, the part of a prune that reads every record's size.
func BenchmarkPruneByBytes(b *testing.B) {
	for _, n := range []int{2_000, 20_000} {
		s, err := Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		at := time.Now().Add(-time.Hour)
		write := func(k int) {
			for range k {
				at = at.Add(time.Millisecond)
				head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: at, Origin: sandbox.Origin{Source: "api"}}
				if err := s.Begin(b.Context(), sandbox.Spec{ID: head.ID, Code: "print(1)", Input: json.RawMessage("null")}, head); err != nil {
					b.Fatal(err)
				}
				head.Outcome, head.Stdout = sandbox.OutcomeOK, strings.Repeat("x", 4096)
				if err := s.Finish(b.Context(), head); err != nil {
					b.Fatal(err)
				}
			}
		}
		write(n)
		r := Retention{MaxBytes: s.LedgerBytes() * 100 / LedgerLowWater}
		b.Run("under/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if d, err := s.Prune(b.Context(), Retention{MaxBytes: 1 << 40}); err != nil || d != 0 {
					b.Fatal(d, err)
				}
			}
		})
		b.Run("over/"+strconv.Itoa(n), func(b *testing.B) {
			var took time.Duration
			deleted := 0
			for range b.N {
				write(200)
				start := time.Now()
				d, err := s.Prune(b.Context(), r)
				if err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				deleted += d
			}
			if deleted > 0 {
				b.ReportMetric(float64(took.Nanoseconds())/float64(deleted), "ns/deleted")
			}
			b.ReportMetric(float64(deleted)/float64(b.N), "deleted/op")
		})
	}
}

// BenchmarkSearchLargeMemories: a search whose word is in each of 600 memories of 64 KiB (an
// attack's shape): the rows' text a search ranks is bounded (rankPrefix, maxRankBytes), so its
// cost does not follow the rows' size.
func BenchmarkSearchLargeMemories(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), FileName), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	text := strings.Repeat("zz filler words here ", 64<<10/21)
	for range 6 {
		batch := make([]Memory, 100)
		for i := range batch {
			batch[i] = Memory{Text: text}
		}
		if _, err := s.AddMemories(b.Context(), "mallory", batch); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if got, err := s.SearchMemories(b.Context(), "mallory", "zz", 1); err != nil || len(got) != 1 {
			b.Fatal(len(got), err)
		}
	}
}
