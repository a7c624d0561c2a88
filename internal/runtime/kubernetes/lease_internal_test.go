package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandpit-dev/sandpit/internal/runtime/slotpool"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestCleanStopReleasesTheLease: a daemon that stops cleanly gives its Lease up, so that
// `sandpit sandbox rm` removes its pods at once; a daemon of the same ID takes it back. Before,
// the Lease stayed "renewed within its duration" and rm refused until it expired.
func TestCleanStopReleasesTheLease(t *testing.T) {
	ctx := t.Context()
	const id = "host-1"
	cs := fake.NewClientset()
	start := func() *Runtime {
		t.Helper()
		r := &Runtime{client: cs, cfg: Config{Namespace: "agents", LeaseDuration: 30 * time.Second, ReapAfter: time.Minute},
			log: testenv.Logger(), daemon: DaemonName(id), opened: map[string]*sessionBox{}, warm: map[string]*warmLine{}}
		r.ctx, r.close = context.WithCancel(context.Background())
		r.slots = slotpool.New(slotpool.Config{Slots: 1}, slotBackend{r}, r.log)
		if err := r.renewLease(ctx); err != nil {
			t.Fatal(err)
		}
		r.supervised.Go(r.keepLease)
		return r
	}
	lease := func() *DaemonObjects {
		t.Helper()
		got, err := ListDaemon(ctx, cs, "agents", id)
		if err != nil || got.Lease == nil {
			t.Fatalf("the daemon's lease: %+v, %v", got, err)
		}
		return &got
	}

	r := start()
	if got := lease(); !LeaseHeld(got.Lease) || LeaseReleased(got.Lease) {
		t.Fatal("a running daemon's lease is not held")
	}
	if _, _, err := RemoveDaemon(ctx, cs, "agents", id); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("RemoveDaemon while the daemon runs = %v, want a refusal", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := lease(); LeaseHeld(got.Lease) || !LeaseReleased(got.Lease) {
		t.Fatalf("after a clean stop the lease is held (holder %q); want it released", *got.Lease.Spec.HolderIdentity)
	}

	// The next daemon of the same ID holds it again; stopped, it is removed at once.
	r = start()
	if got := lease(); !LeaseHeld(got.Lease) {
		t.Fatal("a restarted daemon does not hold its lease")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, removed, err := RemoveDaemon(ctx, cs, "agents", id); err != nil || !removed {
		t.Fatalf("RemoveDaemon after a clean stop = %v, %v; want the lease removed at once", removed, err)
	}

	// A Lease another holder took meanwhile is not given up for it.
	r = start()
	l := lease().Lease
	other := "another"
	l.Spec.HolderIdentity = &other
	if _, err := cs.CoordinationV1().Leases("agents").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := lease(); got.Lease.Spec.HolderIdentity == nil || *got.Lease.Spec.HolderIdentity != other {
		t.Errorf("a lease another holder took was released")
	}
}
