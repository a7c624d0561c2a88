package requirement

import (
	"fmt"
	"regexp"
	"strings"
)

// The version rules of PEP 440, "Version specifiers", as the reference implementation
// (packaging.specifiers.Specifier) writes them. Versions are case-insensitive and may start
// with "v" ("Preceding v character").
const (
	releaseRE = `v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*`                          // epoch and release
	preRE     = `(?:[-_.]?(?:alpha|beta|preview|pre|a|b|c|rc)[-_.]?[0-9]*)?` // pre-release
	postRE    = `(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?`              // post-release
	devRE     = `(?:[-_.]?dev[-_.]?[0-9]*)?`                                 // developmental release
	localRE   = `(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?`                        // local version label
)

var (
	// equalRE is for == and !=: "Version matching" and "Version exclusion" allow a local label
	// or a trailing ".*" (prefix matching), but not both, nor ".*" after a pre, post or dev part.
	equalRE = regexp.MustCompile(`(?i)^` + releaseRE + `(?:\.\*|` + preRE + postRE + devRE + localRE + `)$`)

	// compatibleRE is for ~=: "Compatible release" needs at least two release segments and
	// allows neither a local label nor a wildcard.
	compatibleRE = regexp.MustCompile(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+` + preRE + postRE + devRE + `$`)

	// orderedRE is for <=, >=, < and >: "Inclusive ordered comparison" and "Exclusive ordered
	// comparison" allow neither a local label nor a wildcard.
	orderedRE = regexp.MustCompile(`(?i)^` + releaseRE + preRE + postRE + devRE + `$`)

	// arbitraryRE is for ===: "Arbitrary equality" compares strings, so any PEP 508 version
	// text is allowed (PEP 508: letterOrDigit | '-' | '_' | '.' | '*' | '+' | '!').
	arbitraryRE = regexp.MustCompile(`^[A-Za-z0-9._*+!-]+$`)
)

// checkVersion checks version v for operator op under PEP 440 and returns "" if it is valid, or
// what is wrong.
func checkVersion(op, v string) string {
	if v == "" {
		return fmt.Sprintf("expected a version after %q", op)
	}
	var re *regexp.Regexp
	switch op {
	case "==", "!=":
		re = equalRE
	case "~=":
		re = compatibleRE
	case "===":
		re = arbitraryRE
	default:
		re = orderedRE
	}
	if re.MatchString(v) {
		return ""
	}
	switch {
	case op != "===" && op != "==" && op != "!=" && strings.Contains(v, "*"):
		return fmt.Sprintf("%q uses a wildcard, which PEP 440 allows only after == and !=", op+v)
	case op != "===" && op != "==" && op != "!=" && strings.Contains(v, "+"):
		return fmt.Sprintf("%q has a local version label (+...), which PEP 440 allows only after == and !=", op+v)
	case op == "~=" && orderedRE.MatchString(v):
		return fmt.Sprintf("%q has one release number, but PEP 440 needs two or more after ~=, like \"~=2.1\"", op+v)
	}
	return fmt.Sprintf("%q is not a valid PEP 440 version", v)
}
