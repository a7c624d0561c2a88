package sandbox

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"regexp"
	"strings"
)

// MaxInputDepth is how deeply arrays and objects may nest in a request's input.
const MaxInputDepth = 500

// JSONDepth returns the deepest nesting of arrays and objects in JSON text.
func JSONDepth(text []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range text {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

var (
	agentPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	idPattern    = regexp.MustCompile(`^ex_[a-z2-7]{26}$`)
)

// ValidAgent reports whether name is a valid agent name: 1 to 64 lowercase letters, digits,
// '-' or '_', starting with a letter or digit.
func ValidAgent(name string) bool { return agentPattern.MatchString(name) }

// CheckAgent is the one check of an agent name that every transport and store uses: nil when
// name is valid (ValidAgent), else a *FieldError of field "agent" that says what a name may
// hold. A transport that takes the name elsewhere may add where to its Message.
func CheckAgent(name string) *FieldError {
	if ValidAgent(name) {
		return nil
	}
	return &FieldError{Field: "agent", Message: fmt.Sprintf(
		"%q is not a valid agent name: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit", name)}
}

// ValidID reports whether id has the form of an execution ID (see NewID).
func ValidID(id string) bool { return idPattern.MatchString(id) }

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewID returns a new execution ID: "ex_" and 26 lowercase base32 characters (128 random bits).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "ex_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}
