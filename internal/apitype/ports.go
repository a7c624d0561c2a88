package apitype

import "time"

// PortRequest is one request the daemon forwarded to a session's port, as the ledger recorded
// it (a WebSocket is one request, from its upgrade to its close).
type PortRequest struct {
	// ID is "rq_" and 26 lowercase base32 characters.
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Port      int    `json:"port"`
	Method    string `json:"method"`
	// Path is the path and query on the port's server, its first 1024 bytes.
	Path string `json:"path"`
	// Status is the HTTP status the client got (101 for a WebSocket; 0 when none was sent).
	Status int `json:"status"`
	// Client is who sent it: the remote address.
	Client    string `json:"client"`
	WebSocket bool   `json:"websocket,omitempty"`
	// BytesIn is what the client sent, BytesOut what it got.
	BytesIn    int64     `json:"bytes_in"`
	BytesOut   int64     `json:"bytes_out"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// Error is why the daemon failed it, "" when the server answered.
	Error string `json:"error,omitempty"`
}

// PortRequestList is the answer of GET …/sessions/{id}/ports/requests: a page of the
// requests to the session's ports, newest first, and the cursor of the next page ("" after
// the last).
type PortRequestList struct {
	Requests   []PortRequest `json:"requests"`
	NextCursor string        `json:"next_cursor"`
}

// ShareRequest is the body of POST …/sessions/{id}/shares.
type ShareRequest struct {
	// Port is the session's port to share, 1 to 65535.
	Port int `json:"port"`
	// TTLMS is how long the share works, in milliseconds: 1000 up to the session's
	// max_lifetime_ms; absent is one hour (or the session's max lifetime when shorter).
	TTLMS *int64 `json:"ttl_ms,omitempty"`
}

// Share is a share link of a session's port: whoever opens URL in a browser reaches the port
// until ExpiresAt, until it is revoked (DELETE …/shares/{share}), or until the session ends.
type Share struct {
	// ID is "sh_" and 26 lowercase base32 characters.
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Port      int       `json:"port"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// URL is the link, its secret in the query; only the answer of POST …/shares has it (the
	// daemon keeps the secret's SHA-256 digest only).
	URL string `json:"url,omitempty"`
}

// ShareList is the answer of GET …/sessions/{id}/shares: the session's unexpired shares,
// newest first, without their secrets.
type ShareList struct {
	Shares []Share `json:"shares"`
}

// Port is a TCP port a session's processes listen on, and the daemon's path that reaches it.
type Port struct {
	Port int `json:"port"`
	// Address is where it listens: "127.0.0.1", "::1", "0.0.0.0" or "::".
	Address string `json:"address"`
	// Path is the daemon's path form of it ("/v1/agents/a/sessions/se_…/ports/8000/").
	Path string `json:"path"`
}

// PortList is the answer of GET …/sessions/{id}/ports: the ports the session listens on, by
// port.
type PortList struct {
	Ports []Port `json:"ports"`
}
