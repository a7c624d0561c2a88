package apitype

import "time"

// Secret is a secret as the daemon lists it: its name, scope and binding, never its value.
// The code of a run that names it sees the environment variable Name holding the placeholder
// "sandpit-secret:NAME"; the egress proxy puts the value in its place only in a request to
// one of Hosts, in the header Header (docs/secrets.md).
type Secret struct {
	Name string `json:"name"`
	// Agent is the agent whose runs may name it; absent for a secret shared by every agent.
	Agent string `json:"agent,omitempty"`
	// Hosts are the host names the value may be sent to ("api.example.com", "*.example.com").
	Hosts []string `json:"hosts"`
	// Header is the request header the value goes in.
	Header string `json:"header"`
	// Format is the header's value with {{secret}} where the value goes ("Bearer {{secret}}").
	Format string `json:"format,omitempty"`
	// BasicUser, when set, makes the place HTTP basic authentication with this user name and
	// the value as the password.
	BasicUser string    `json:"basic_user,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Warnings, in PUT's answer only, say why the daemon would never send the value as set:
	// its network setting, or hosts that its network_allow does not reach.
	Warnings []string `json:"warnings,omitempty"`
}

// SecretSet is the body of PUT /v1/secrets/{name}: it makes the secret, or replaces the one of
// the same name and scope.
type SecretSet struct {
	// Agent makes the secret that agent's alone; absent: shared by every agent.
	Agent string `json:"agent,omitempty"`
	// Value is the secret's value (at most 16 KiB of text without control characters). It is
	// never answered.
	Value string `json:"value"`
	// Hosts, Header, Format and BasicUser are its binding (see Secret); Header defaults to
	// Authorization, and Format then to "Bearer {{secret}}" (else to "{{secret}}").
	Hosts     []string `json:"hosts"`
	Header    string   `json:"header,omitempty"`
	Format    string   `json:"format,omitempty"`
	BasicUser string   `json:"basic_user,omitempty"`
}

// SecretList is the answer of GET /v1/secrets: every secret, or with ?agent= that agent's and
// the shared ones, by agent then name.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
