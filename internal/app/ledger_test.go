package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The background pruner prunes the ledger as soon as a run's record takes it past
// ledger_max_bytes, not at the next hourly round.
func TestPruneLedgerWhenOverItsBytes(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	retention := store.Retention{MaxBytes: 1 << 20}
	st.SetRetention(retention)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { pruneLedger(ctx, st, retention, time.Hour, slog.New(slog.DiscardHandler)); close(done) }()
	defer func() { cancel(); <-done }()

	now := time.Now().UTC()
	var ids []string
	for i := range 4 { // 4 records of 300 KiB: the fourth passes 1 MiB
		head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: now.Add(time.Duration(i) * time.Second),
			Origin: sandbox.Origin{Source: "api"}}
		if err := st.Begin(t.Context(), sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null")}, head); err != nil {
			t.Fatal(err)
		}
		head.Outcome, head.Stdout = sandbox.OutcomeOK, strings.Repeat("x", 300<<10)
		if err := st.Finish(t.Context(), head); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, head.ID)
	}
	// Wait for the prune (the hourly round cannot be it); the deadline only bounds a failure.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		_, err := st.GetExecution(t.Context(), ids[0])
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the oldest record is still there a minute after the ledger (%d bytes) passed its budget: %v", st.LedgerBytes(), err)
		}
	}
	if used := st.LedgerBytes(); used > retention.MaxBytes/100*store.LedgerLowWater {
		t.Errorf("after the prune the ledger holds %d bytes, over %d%% of its budget", used, store.LedgerLowWater)
	}
	for _, id := range ids[2:] {
		if _, err := st.GetExecution(t.Context(), id); err != nil {
			t.Errorf("a newer record was pruned: %v", err)
		}
	}
}
