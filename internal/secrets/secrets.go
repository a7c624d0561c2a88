// Package secrets keeps the credentials that sandboxed code may use but never read. The daemon
// holds each secret's value encrypted at rest (AES-256-GCM, Cipher) with a key kept outside
// the database (a 0600 file in the data directory, or SANDPIT_SECRETS_KEY); a run or session
// that names a secret gets only a placeholder (Placeholder), which the daemon's side of the
// egress proxy replaces with the value in a request to one of the secret's hosts, in the place
// its binding names. Keeper is the secrets' store with the cipher; nothing it answers holds a
// value, but Resolve, for the egress proxy.
package secrets

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// PlaceholderPrefix starts every placeholder: the code sees "sandpit-secret:NAME" where the
// value would be.
const PlaceholderPrefix = "sandpit-secret:"

// Placeholder is what the code sees in env var name instead of the secret's value.
func Placeholder(name string) string { return PlaceholderPrefix + name }

// SecretToken is the mark in a binding's Format where the value goes.
const SecretToken = "{{secret}}"

// MaxValueBytes caps a secret's value (an API key, a token, a password).
const MaxValueBytes = 16 << 10

// MaxHosts caps the hosts one secret binds to.
const MaxHosts = 32

var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// reservedNames are environment variables a run depends on: a secret may not shadow them.
var reservedNames = []string{"PATH", "HOME", "USER", "PWD", "SHELL", "LANG", "TMPDIR", "PYTHONPATH", "PYTHONHOME",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "PIP_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
	"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "INPUT", "OUTPUT"}

// CheckName is nil when name may name a secret: an environment variable's name (a letter or
// '_', then letters, digits or '_', 64 at most) that no run depends on and that does not start
// with SANDPIT_. Else a *sandbox.FieldError of field "name".
func CheckName(name string) *sandbox.FieldError {
	switch {
	case !namePattern.MatchString(name):
		return &sandbox.FieldError{Field: "name", Message: fmt.Sprintf("%q is not a valid secret name: the code reads the secret's placeholder from the environment variable of that name, so use 1 to 64 letters, digits or '_', not starting with a digit (such as OPENAI_API_KEY)", name)}
	case slices.Contains(reservedNames, strings.ToUpper(name)) || strings.HasPrefix(strings.ToUpper(name), "SANDPIT_"):
		return &sandbox.FieldError{Field: "name", Message: fmt.Sprintf("%q is an environment variable every run depends on (or starts with SANDPIT_); choose another name", name)}
	}
	return nil
}

// Binding says where a secret may go: to which hosts and in which place of a request.
type Binding struct {
	// Hosts are the host names the value may be sent to: "api.example.com", or
	// "*.example.com" for every name under example.com (not example.com itself); any port.
	Hosts []string `json:"hosts"`
	// Header is the request header the value goes in, such as "Authorization".
	Header string `json:"header"`
	// Format is the header's value with SecretToken where the value goes, such as
	// "Bearer {{secret}}"; empty with BasicUser.
	Format string `json:"format,omitempty"`
	// BasicUser makes the place HTTP basic authentication (Header is Authorization): the
	// value is the password of this user.
	BasicUser string `json:"basic_user,omitempty"`
}

// Check validates b and returns it normalised (host names in lower case, the header name
// canonical). Errors are *sandbox.FieldError of fields "hosts", "header", "format" and
// "basic_user".
func (b Binding) Check() (Binding, error) {
	if len(b.Hosts) == 0 {
		return b, &sandbox.FieldError{Field: "hosts", Message: "is empty: name the hosts the secret may be sent to, such as [\"api.example.com\"] or [\"*.example.com\"]"}
	}
	if len(b.Hosts) > MaxHosts {
		return b, &sandbox.FieldError{Field: "hosts", Message: fmt.Sprintf("has %d hosts, more than %d", len(b.Hosts), MaxHosts)}
	}
	hosts := make([]string, 0, len(b.Hosts))
	for _, h := range b.Hosts {
		name, wild := h, false
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			name, wild = rest, true
		}
		n, err := egress.NormalizeHost(name)
		if err != nil || !strings.Contains(n, ".") && !wild && n != "localhost" {
			if err == nil {
				err = fmt.Errorf("is not a dotted host name")
			}
			return b, &sandbox.FieldError{Field: "hosts", Message: fmt.Sprintf("%q: %v; give a host name such as api.example.com or *.example.com (no port, no scheme)", h, err)}
		}
		if wild {
			n = "*." + n
		}
		if !slices.Contains(hosts, n) {
			hosts = append(hosts, n)
		}
	}
	b.Hosts = hosts
	if b.Header == "" {
		b.Header = "Authorization"
	}
	if !validHeaderName(b.Header) {
		return b, &sandbox.FieldError{Field: "header", Message: fmt.Sprintf("%q is not an HTTP header name (letters, digits and -)", b.Header)}
	}
	b.Header = canonicalHeader(b.Header)
	switch h := strings.ToLower(b.Header); {
	case h == "proxy-authorization" || h == "host":
		return b, &sandbox.FieldError{Field: "header", Message: fmt.Sprintf("%s cannot carry a secret: it is not sent to the host", b.Header)}
	}
	if b.BasicUser != "" {
		if b.Format != "" {
			return b, &sandbox.FieldError{Field: "format", Message: "is given with basic_user: give one place, a header format or basic authentication"}
		}
		if b.Header != "Authorization" {
			return b, &sandbox.FieldError{Field: "header", Message: "must be Authorization (or left out) with basic_user"}
		}
		if strings.ContainsAny(b.BasicUser, ":\r\n") {
			return b, &sandbox.FieldError{Field: "basic_user", Message: "must not hold ':' or a line break"}
		}
		return b, nil
	}
	if b.Format == "" {
		b.Format = "Bearer " + SecretToken
		if b.Header != "Authorization" {
			b.Format = SecretToken
		}
	}
	if strings.Count(b.Format, SecretToken) != 1 || strings.ContainsAny(b.Format, "\r\n") {
		return b, &sandbox.FieldError{Field: "format", Message: fmt.Sprintf("%q must hold %s exactly once, where the value goes (such as \"Bearer %s\"), and no line break", b.Format, SecretToken, SecretToken)}
	}
	return b, nil
}

// MatchHost says whether the secret may be sent to host (a name; compared in lower case
// without a trailing dot).
func (b Binding) MatchHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, h := range b.Hosts {
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+rest) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func canonicalHeader(s string) string {
	b := []byte(strings.ToLower(s))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}

// Secret is a secret's record: never its value.
type Secret struct {
	// Name is the secret's name, also the environment variable holding its placeholder.
	Name string `json:"name"`
	// Agent is the agent whose runs may name it; "" for a secret every agent's runs may name.
	// An agent's own secret hides a shared one of the same name.
	Agent string `json:"agent,omitempty"`
	Binding
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}
