package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// The API keys of the E2B-compatible API (/v1/keys): they belong to no agent, and the daemon
// serves them to whoever holds its token.

// CreateAPIKey makes a key for agent with a note (name, may be empty) and returns the key,
// given this once, with its record. An invalid agent is an *APIError naming the field agent.
func (c *Client) CreateAPIKey(ctx context.Context, agent, name string) (apitype.APIKeyCreated, error) {
	var out apitype.APIKeyCreated
	err := c.call(ctx, http.MethodPost, "/v1/keys", apitype.APIKeyCreate{Agent: agent, Name: name}, &out)
	return out, err
}

// ListAPIKeys lists agent's keys ("": every agent's), revoked ones too, oldest first.
func (c *Client) ListAPIKeys(ctx context.Context, agent string) ([]apitype.APIKey, error) {
	path := "/v1/keys"
	if agent != "" {
		path += "?" + url.Values{"agent": {agent}}.Encode()
	}
	var out apitype.APIKeyList
	err := c.getJSON(ctx, path, &out)
	return out.Keys, err
}

// RevokeAPIKey revokes a key by its ID or the key itself (sent in the body, never in a URL)
// and returns it as revoked; no such key is an *APIError of class NotFound.
func (c *Client) RevokeAPIKey(ctx context.Context, idOrKey string) (apitype.APIKey, error) {
	var out apitype.APIKey
	err := c.call(ctx, http.MethodPost, "/v1/keys/revoke", apitype.APIKeyRevoke{Key: idOrKey}, &out)
	return out, err
}

// The secrets the egress proxy adds to requests (/v1/secrets): like the keys, they belong to
// no agent; no answer holds a value.

// SetSecret makes the secret name (or replaces the one of its name and scope) with the value
// and binding of s, and returns its record. An invalid field is an *APIError naming it.
func (c *Client) SetSecret(ctx context.Context, name string, s apitype.SecretSet) (apitype.Secret, error) {
	var out apitype.Secret
	err := c.call(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), s, &out)
	return out, err
}

// ListSecrets lists every secret, or with agent that agent's and the shared ones.
func (c *Client) ListSecrets(ctx context.Context, agent string) ([]apitype.Secret, error) {
	path := "/v1/secrets"
	if agent != "" {
		path += "?" + url.Values{"agent": {agent}}.Encode()
	}
	var out apitype.SecretList
	err := c.getJSON(ctx, path, &out)
	return out.Secrets, err
}

// RemoveSecret removes agent's secret name ("" the shared one); none is an *APIError of class
// NotFound.
func (c *Client) RemoveSecret(ctx context.Context, agent, name string) error {
	path := "/v1/secrets/" + url.PathEscape(name)
	if agent != "" {
		path += "?" + url.Values{"agent": {agent}}.Encode()
	}
	var out apitype.Deleted
	return c.call(ctx, http.MethodDelete, path, nil, &out)
}
