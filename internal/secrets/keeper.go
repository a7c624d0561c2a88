package secrets

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Store keeps secrets' records and sealed values; *store.Store is one.
type Store interface {
	// PutSecret stores s with its sealed value, replacing one of the same agent and name.
	PutSecret(ctx context.Context, s Secret, sealed []byte) (Secret, error)
	// ListSecrets lists agent's secrets ("" every agent's and the shared ones), with the
	// shared ones when shared is true.
	ListSecrets(ctx context.Context, agent string, shared bool) ([]Secret, error)
	// DeleteSecret removes agent's secret name (agent "" the shared one); none is an error
	// of class NotFound.
	DeleteSecret(ctx context.Context, agent, name string) error
	// SealedSecret returns the secret name agent's runs may name (its own, else the shared
	// one) with its sealed value; none is an error of class NotFound.
	SealedSecret(ctx context.Context, agent, name string) (Secret, []byte, error)
}

// Keeper sets, lists and removes secrets, sealing their values with its Cipher. Only Resolve
// answers a value.
type Keeper struct {
	store  Store
	cipher *Cipher
}

// NewKeeper returns a Keeper of the secrets in st, sealed with c.
func NewKeeper(st Store, c *Cipher) *Keeper { return &Keeper{store: st, cipher: c} }

// Set stores the secret s.Name of s.Agent ("" shared) with value and s.Binding (checked,
// see Binding.Check), replacing one of the same scope and name, and returns its record.
// Errors: *sandbox.FieldError for an invalid name, agent, binding or value.
func (k *Keeper) Set(ctx context.Context, s Secret, value []byte) (Secret, error) {
	if err := CheckName(s.Name); err != nil {
		return Secret{}, err
	}
	if s.Agent != "" {
		if err := sandbox.CheckAgent(s.Agent); err != nil {
			return Secret{}, err
		}
	}
	switch {
	case len(value) == 0:
		return Secret{}, &sandbox.FieldError{Field: "value", Message: "is empty: give the secret's value"}
	case len(value) > MaxValueBytes:
		return Secret{}, &sandbox.FieldError{Field: "value", Message: fmt.Sprintf("has %d bytes, more than %d", len(value), MaxValueBytes)}
	case !utf8.Valid(value) || containsControl(value):
		return Secret{}, &sandbox.FieldError{Field: "value", Message: "holds a control character (a line break?) or invalid UTF-8: a value goes in an HTTP header, which holds neither"}
	}
	b, err := s.Binding.Check()
	if err != nil {
		return Secret{}, err
	}
	s.Binding = b
	return k.store.PutSecret(ctx, s, k.cipher.Seal(s.Agent, s.Name, value))
}

func containsControl(v []byte) bool {
	for _, c := range v {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// List returns the records of agent's secrets ("" every agent's and the shared ones), with
// the shared ones when shared is true; never a value.
func (k *Keeper) List(ctx context.Context, agent string, shared bool) ([]Secret, error) {
	return k.store.ListSecrets(ctx, agent, shared)
}

// Remove removes agent's secret name ("" the shared one). Errors: of class NotFound when there
// is none.
func (k *Keeper) Remove(ctx context.Context, agent, name string) error {
	return k.store.DeleteSecret(ctx, agent, name)
}

// Resolve returns the secret name that agent's runs may name (its own, else the shared one)
// and its value, for the egress proxy only. Errors: of class NotFound when there is none; one
// naming the secret when its value does not open.
func (k *Keeper) Resolve(ctx context.Context, agent, name string) (Secret, []byte, error) {
	s, sealed, err := k.store.SealedSecret(ctx, agent, name)
	if err != nil {
		return Secret{}, nil, err
	}
	v, err := k.cipher.Open(s.Agent, s.Name, sealed)
	if err != nil {
		return Secret{}, nil, err
	}
	return s, v, nil
}
