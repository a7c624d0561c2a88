package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// MaxPerRun caps the secrets one run may name.
const MaxPerRun = 16

// Source resolves the secrets runs name (engine.Secrets): their values from the Keeper, added
// by the Injector.
type Source struct {
	keeper *Keeper
	inj    *Injector
}

// NewSource returns the Source of keeper's secrets, added by inj.
func NewSource(keeper *Keeper, inj *Injector) *Source { return &Source{keeper: keeper, inj: inj} }

var _ engine.Secrets = (*Source)(nil)

// Open resolves names for agent (its own secret, else the shared one). Errors: a
// *sandbox.FieldError of field "secrets" for a name that is not a secret agent may use, a
// repeated name or too many.
func (s *Source) Open(ctx context.Context, agent string, names []string) (engine.SecretsRun, error) {
	if len(names) > MaxPerRun {
		return nil, &sandbox.FieldError{Field: "secrets", Message: fmt.Sprintf("names %d secrets, more than %d", len(names), MaxPerRun)}
	}
	bound := make([]Bound, 0, len(names))
	for i, name := range names {
		if err := CheckName(name); err != nil {
			return nil, &sandbox.FieldError{Field: "secrets", Message: err.Message}
		}
		if slices.Contains(names[:i], name) {
			return nil, &sandbox.FieldError{Field: "secrets", Message: fmt.Sprintf("names %s twice", name)}
		}
		sec, value, err := s.keeper.Resolve(ctx, agent, name)
		if errors.Is(err, errclass.NotFound) {
			return nil, &sandbox.FieldError{Field: "secrets", Message: fmt.Sprintf("%s is not a secret of agent %q nor a shared one; `sandpit secrets list --agent %s` lists them", name, agent, agent)}
		}
		if err != nil {
			return nil, err
		}
		bound = append(bound, Bound{Secret: sec, Value: value})
	}
	return &runSecrets{Run: s.inj.ForRun(bound), ca: string(s.inj.ca.CertPEM())}, nil
}

// runSecrets is engine.SecretsRun's.
type runSecrets struct {
	*Run
	ca string
}

func (r *runSecrets) Env() map[string]string {
	env := make(map[string]string, len(r.bound))
	for _, b := range r.bound {
		env[b.Name] = Placeholder(b.Name)
	}
	return env
}

func (r *runSecrets) CA() string { return r.ca }

func (r *runSecrets) Attach(gate sandbox.EgressRun) {
	if g, ok := gate.(*egress.Gate); ok {
		g.SetWrapper(r.Run)
	}
}
