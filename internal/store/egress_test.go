package store

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The ledger keeps a run's outbound connections and its uses of secrets, and gives them back
// with its record.
func TestExecutionEgressRoundTrip(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", StartedAt: now, Origin: sandbox.Origin{Source: "api"}}
	if err := s.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null")}, head); err != nil {
		t.Fatal(err)
	}
	head.Outcome = sandbox.OutcomeOK
	head.Egress = []sandbox.EgressConnection{
		{Host: "api.example.com", Port: 443, Address: "93.184.215.14", Allowed: true, Rule: "*.example.com", BytesSent: 10, BytesReceived: 20, StartedAt: now, DurationMS: 5},
		{Host: "169.254.169.254", Port: 80, Reason: "the cloud metadata address", StartedAt: now},
	}
	head.EgressOmitted = 3
	head.SecretUses = []sandbox.SecretUse{{Secret: "TOKEN", Host: "api.example.com", Added: true, Status: 200},
		{Secret: "TOKEN", Host: "other.example", Why: "the secret is not bound to this host"}}
	head.SecretUsesOmitted = 1
	if err := s.Finish(ctx, head); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetExecution(ctx, head.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Egress) != 2 || got.Egress[0] != head.Egress[0] || got.Egress[1].Reason != head.Egress[1].Reason || got.EgressOmitted != 3 {
		t.Errorf("egress read back as %+v (omitted %d), want %+v", got.Egress, got.EgressOmitted, head.Egress)
	}
	if !slices.Equal(got.SecretUses, head.SecretUses) || got.SecretUsesOmitted != 1 {
		t.Errorf("secret uses read back as %+v (omitted %d), want %+v", got.SecretUses, got.SecretUsesOmitted, head.SecretUses)
	}
}
