package apitype

import "time"

// APIKey is an API key of the E2B-compatible API as the daemon lists it: never the key
// itself, which only its creation answers (APIKeyCreated).
type APIKey struct {
	// ID names the key in listings and revocation ("key_" and 26 base32 characters).
	ID string `json:"id"`
	// Agent is the agent the key acts for: it sees only that agent's sandboxes.
	Agent string `json:"agent"`
	// Name is the note given at creation (who holds it, what for).
	Name string `json:"name,omitempty"`
	// Prefix is the key's first 12 characters, enough to tell keys apart.
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// APIKeyCreate is the body of POST /v1/keys.
type APIKeyCreate struct {
	// Agent is the agent the key acts for (required).
	Agent string `json:"agent"`
	// Name is a note shown in listings.
	Name string `json:"name,omitempty"`
}

// APIKeyCreated is the answer of POST /v1/keys (201): the key, given this once (the daemon
// keeps only its SHA-256 digest), with its record.
type APIKeyCreated struct {
	Key string `json:"key"`
	APIKey
}

// APIKeyList is the answer of GET /v1/keys: every key (or one agent's, with ?agent=), revoked
// ones too, oldest first.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// APIKeyRevoke is the body of POST /v1/keys/revoke.
type APIKeyRevoke struct {
	// Key is the key's ID ("key_…") or the key itself.
	Key string `json:"key"`
}
