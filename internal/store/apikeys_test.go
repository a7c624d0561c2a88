package store

import (
	"errors"
	"regexp"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

func TestAPIKeys(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	key, info, err := s.CreateAPIKey(ctx, "alice", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) || info.Prefix != key[:12] || info.Agent != "alice" {
		t.Fatalf("key %q, info %+v", key, info)
	}
	other, _, err := s.CreateAPIKey(ctx, "bob", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, agent string }{{key, "alice"}, {other, "bob"}} {
		if got, err := s.APIKeyAgent(ctx, c.key); err != nil || got != c.agent {
			t.Errorf("APIKeyAgent(%s) = %q, %v; want %q", c.key[:12], got, err, c.agent)
		}
	}
	// The issued key with its last digit changed (to "1" when it ends in "0": 1 in 16 of keys
	// did, and the "never issued" key was then the issued one).
	last := "0"
	if key[len(key)-1] == '0' {
		last = "1"
	}
	if _, err := s.APIKeyAgent(ctx, key[:len(key)-1]+last); !errors.Is(err, ErrAPIKeyUnknown) || !errors.Is(err, errclass.Forbidden) {
		t.Errorf("a key never issued: %v", err)
	}
	if _, _, err := s.CreateAPIKey(ctx, "Not An Agent", ""); !errors.Is(err, errclass.Invalid) {
		t.Errorf("an invalid agent: %v", err)
	}
	keys, err := s.ListAPIKeys(ctx, "alice")
	if err != nil || len(keys) != 1 || keys[0].ID != info.ID || keys[0].RevokedAt != nil {
		t.Fatalf("alice's keys: %+v, %v", keys, err)
	}
	if all, _ := s.ListAPIKeys(ctx, ""); len(all) != 2 {
		t.Fatalf("all keys: %+v", all)
	}
	// By ID, then again by the key itself: both answer it revoked.
	for _, id := range []string{info.ID, key} {
		k, err := s.RevokeAPIKey(ctx, id)
		if err != nil || k.RevokedAt == nil || k.ID != info.ID {
			t.Fatalf("RevokeAPIKey(%s) = %+v, %v", id[:12], k, err)
		}
	}
	if _, err := s.APIKeyAgent(ctx, key); !errors.Is(err, ErrAPIKeyUnknown) {
		t.Errorf("a revoked key still resolves: %v", err)
	}
	if got, err := s.APIKeyAgent(ctx, other); err != nil || got != "bob" {
		t.Errorf("bob's key after alice's was revoked: %q, %v", got, err)
	}
	if _, err := s.RevokeAPIKey(ctx, "key_nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking no key: %v", err)
	}
}
