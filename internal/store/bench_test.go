package store

import (
	"encoding/json"
	"path/filepath"
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
