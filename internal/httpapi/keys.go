package httpapi

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// KeyManager makes, lists and revokes the API keys of the E2B-compatible API; *store.Store
// satisfies it. Its routes (/v1/keys) belong to no agent: whoever reaches the REST API (past
// its token, when the daemon has one) manages every agent's keys, as `sandpit keys` does on
// the daemon's database.
type KeyManager interface {
	// CreateAPIKey makes a key for agent, returned once with its record; an invalid agent is
	// a *sandbox.FieldError.
	CreateAPIKey(ctx context.Context, agent, name string) (string, store.APIKey, error)
	// ListAPIKeys lists agent's keys ("": every agent's), revoked ones too.
	ListAPIKeys(ctx context.Context, agent string) ([]store.APIKey, error)
	// RevokeAPIKey revokes a key by its ID or the key itself (none: an error of class NotFound).
	RevokeAPIKey(ctx context.Context, idOrKey string) (store.APIKey, error)
}

var _ KeyManager = (*store.Store)(nil)

func (a *api) routeKeys() {
	a.handle("POST /v1/keys", a.createKey)
	a.handle("GET /v1/keys", a.listKeys)
	a.handle("POST /v1/keys/revoke", a.revokeKey)
}

var keyCreateShape = shape{flat: true, fields: []string{"agent", "name"},
	expect:  map[string]string{"agent": "must be an agent name string", "name": "must be a string"},
	example: `{"agent": "alice", "name": "alice's E2B SDK"}`}

func (a *api) createKey(w http.ResponseWriter, r *http.Request) {
	var b apitype.APIKeyCreate
	if err := readBody(w, r, 4096, &b, keyCreateShape); err != nil {
		writeError(w, err)
		return
	}
	if b.Agent == "" {
		writeError(w, invalid("agent", `is missing: give the agent whose sandboxes the key may use, such as {"agent": "alice"}`))
		return
	}
	key, k, err := a.keys.CreateAPIKey(r.Context(), b.Agent, b.Name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, apitype.APIKeyCreated{Key: key, APIKey: apiKeyOf(k)})
}

func (a *api) listKeys(w http.ResponseWriter, r *http.Request) {
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
	list, err := a.keys.ListAPIKeys(r.Context(), agent)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := apitype.APIKeyList{Keys: each(list, apiKeyOf)}
	if out.Keys == nil {
		out.Keys = []apitype.APIKey{}
	}
	writeJSON(w, http.StatusOK, out)
}

var keyRevokeShape = shape{flat: true, fields: []string{"key"}, expect: map[string]string{"key": "must be a key's ID (key_…) or the key itself"},
	example: `{"key": "key_0123456789abcdefghijklmnop"}`}

func (a *api) revokeKey(w http.ResponseWriter, r *http.Request) {
	var b apitype.APIKeyRevoke
	if err := readBody(w, r, 4096, &b, keyRevokeShape); err != nil {
		writeError(w, err)
		return
	}
	if b.Key == "" {
		writeError(w, invalid("key", "is missing: give the key's ID (GET /v1/keys lists them) or the key itself"))
		return
	}
	k, err := a.keys.RevokeAPIKey(r.Context(), b.Key)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiKeyOf(k))
}

// apiKeyOf maps a key's record to its wire form.
func apiKeyOf(k store.APIKey) apitype.APIKey {
	return apitype.APIKey{ID: k.ID, Agent: k.Agent, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}
