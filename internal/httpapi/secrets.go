package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// SecretManager sets, lists and removes the secrets the egress proxy adds to requests;
// *secrets.Keeper satisfies it. Like /v1/keys its routes (/v1/secrets) belong to no agent:
// whoever reaches the REST API (past its token) manages every agent's secrets. No answer holds
// a value.
type SecretManager interface {
	// Set stores a secret with its value; an invalid field is a *sandbox.FieldError.
	Set(ctx context.Context, s secrets.Secret, value []byte) (secrets.Secret, error)
	// List lists agent's secrets ("" every one), with the shared ones when shared is true.
	List(ctx context.Context, agent string, shared bool) ([]secrets.Secret, error)
	// Remove removes agent's secret name ("" the shared one); none is of class NotFound.
	Remove(ctx context.Context, agent, name string) error
}

var _ SecretManager = (*secrets.Keeper)(nil)

func (a *api) routeSecrets() {
	a.handle("GET /v1/secrets", a.listSecrets)
	a.handle("PUT /v1/secrets/{name}", a.setSecret)
	a.handle("DELETE /v1/secrets/{name}", a.removeSecret)
}

var secretSetShape = shape{flat: true, fields: []string{"agent", "value", "hosts", "header", "format", "basic_user"},
	expect: map[string]string{"agent": "must be an agent name string", "value": "must be a string", "hosts": "must be an array of host names",
		"header": "must be a header name string", "format": "must be a string holding {{secret}}", "basic_user": "must be a string"},
	example: `{"value": "sk-...", "hosts": ["api.example.com"], "header": "Authorization", "format": "Bearer {{secret}}"}`}

func (a *api) setSecret(w http.ResponseWriter, r *http.Request) {
	var b apitype.SecretSet
	if err := readBody(w, r, 2*secrets.MaxValueBytes+64<<10, &b, secretSetShape); err != nil {
		writeError(w, err)
		return
	}
	s, err := a.secrets.Set(r.Context(), secrets.Secret{Name: r.PathValue("name"), Agent: b.Agent,
		Binding: secrets.Binding{Hosts: b.Hosts, Header: b.Header, Format: b.Format, BasicUser: b.BasicUser}}, []byte(b.Value))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := secretOf(s)
	if a.ex != nil {
		out.Warnings = unreachable(a.ex.Config(), s.Hosts)
	}
	writeJSON(w, http.StatusOK, out)
}

// unreachable says why runs under cfg would never send a secret bound to hosts: a network
// setting that puts no connection through the egress proxy (which adds the value), or hosts
// that network_allow does not reach (a secret opens no host).
func unreachable(cfg engine.Config, hosts []string) []string {
	switch cfg.Network {
	case sandbox.NetworkAllowlist:
	case sandbox.NetworkNone:
		return []string{`the daemon's network is "none": no run connects anywhere, so the value is never sent; set network to "allowlist" and add the secret's hosts to network_allow`}
	case sandbox.NetworkFull:
		return []string{`the daemon's network is "full": runs connect without its egress proxy, which is what adds the value, so it is never sent; set network to "allowlist" (the default) with the secret's hosts in network_allow`}
	default:
		return nil
	}
	p, err := egress.ParsePolicy("network_allow", cfg.NetworkAllow)
	if err != nil {
		return nil // the daemon checked it when it started
	}
	var out []string
	for _, h := range hosts {
		if !p.MayReach(h) {
			out = append(out, fmt.Sprintf("%s is not reached by the daemon's network_allow, so no run can connect to it and the value is never sent there; add it to network_allow in the configuration", h))
		}
	}
	return out
}

func (a *api) listSecrets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkQuery(q, "agent"); err != nil {
		writeError(w, err)
		return
	}
	agent := q.Get("agent")
	if agent != "" {
		if err := sandbox.CheckAgent(agent); err != nil {
			err.Message += " (the query parameter agent)"
			writeError(w, err)
			return
		}
	}
	list, err := a.secrets.List(r.Context(), agent, true)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := apitype.SecretList{Secrets: each(list, secretOf)}
	if out.Secrets == nil {
		out.Secrets = []apitype.Secret{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) removeSecret(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkQuery(q, "agent"); err != nil {
		writeError(w, err)
		return
	}
	if err := a.secrets.Remove(r.Context(), q.Get("agent"), r.PathValue("name")); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.Deleted{Deleted: r.PathValue("name")})
}

// secretOf maps a secret's record to its wire form.
func secretOf(s secrets.Secret) apitype.Secret {
	return apitype.Secret{Name: s.Name, Agent: s.Agent, Hosts: s.Hosts, Header: s.Header, Format: s.Format, BasicUser: s.BasicUser,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}
