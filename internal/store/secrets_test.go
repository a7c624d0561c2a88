package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// TestSecretsAreSealedAndScoped: a secret's value is stored sealed (the table never holds it
// in clear), listings hold no value, an agent's own secret hides a shared one of its name, a
// sealed value moved to another secret's row does not open, and removing one leaves the other.
func TestSecretsAreSealedAndScoped(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	c, err := secrets.NewCipher(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	k := secrets.NewKeeper(s, c)
	bind := secrets.Binding{Hosts: []string{"API.example.com", "*.GitHub.com"}}
	if _, err := k.Set(ctx, secrets.Secret{Name: "TOKEN", Binding: bind}, []byte("shared-value-1234")); err != nil {
		t.Fatal(err)
	}
	got, err := k.Set(ctx, secrets.Secret{Name: "TOKEN", Agent: "alice", Binding: bind}, []byte("alice-value-5678"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Header != "Authorization" || got.Format != "Bearer {{secret}}" || got.Hosts[0] != "api.example.com" || got.Hosts[1] != "*.github.com" {
		t.Fatalf("stored binding %+v", got.Binding)
	}
	var raw []byte
	rows, err := s.r.QueryContext(ctx, `SELECT value, binding FROM secrets`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v []byte
		var b string
		if err := rows.Scan(&v, &b); err != nil {
			t.Fatal(err)
		}
		raw = append(append(raw, v...), b...)
	}
	rows.Close()
	if bytes.Contains(raw, []byte("value-")) {
		t.Fatal("a value is stored in clear")
	}
	for agent, want := range map[string]string{"alice": "alice-value-5678", "bob": "shared-value-1234"} {
		_, v, err := k.Resolve(ctx, agent, "TOKEN")
		if err != nil || string(v) != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", agent, v, err, want)
		}
	}
	list, err := k.List(ctx, "bob", true)
	if err != nil || len(list) != 1 || list[0].Agent != "" || list[0].Name != "TOKEN" {
		t.Fatalf("bob's list %+v, %v", list, err)
	}
	// alice's sealed value in the shared row does not open.
	if _, err := s.w.ExecContext(ctx, `UPDATE secrets SET value = (SELECT value FROM secrets WHERE agent = 'alice') WHERE agent = ''`); err != nil {
		t.Fatal(err)
	}
	if _, v, err := k.Resolve(ctx, "bob", "TOKEN"); err == nil || v != nil {
		t.Fatalf("a moved sealed value opened: %q", v)
	}
	if err := k.Remove(ctx, "alice", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := k.Remove(ctx, "alice", "TOKEN"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "there is a shared one (name no agent)") {
		t.Fatalf("second remove: %v, want not found, pointing at the shared one", err)
	}
	// A remove in the wrong scope names the scopes that have one (a new user's rm without
	// --agent answered a bare "not found").
	if _, err := k.Set(ctx, secrets.Secret{Name: "ONLY", Agent: "carol", Binding: secrets.Binding{Hosts: []string{"a.example"}}}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := k.Remove(ctx, "", "ONLY"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `one of agent "carol" (name that agent)`) {
		t.Fatalf("removing the shared ONLY: %v, want not found, naming carol's", err)
	}
	if err := k.Remove(ctx, "", "NONE"); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "there is") {
		t.Fatalf("removing a name no scope has: %v", err)
	}
	if list, _ := k.List(ctx, "", true); len(list) != 2 {
		t.Fatalf("after remove %+v", list)
	}
}
