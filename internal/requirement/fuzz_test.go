package requirement

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var keyRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// FuzzParse checks the gate's promises on any input: Parse never panics; a refusal is an *Error
// for the entry; and whatever is accepted has a normalised Key and prints as text that pip can
// only read as a requirement on an index package, and that parses back to the same Requirement.
func FuzzParse(f *testing.F) {
	for _, tt := range accepted {
		f.Add(tt.in)
	}
	for _, tt := range refused {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(in)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Entry != in || e.Reason == "" {
				t.Fatalf("Parse(%q) error %#v is not an *Error for the entry", in, err)
			}
			return
		}
		if !keyRE.MatchString(r.Key) || r.Key != Normalize(r.Name) || !nameRE.MatchString(r.Name) {
			t.Fatalf("Parse(%q): bad name %q or key %q", in, r.Name, r.Key)
		}
		for _, x := range r.Extras {
			if !keyRE.MatchString(x) {
				t.Fatalf("Parse(%q): bad extra %q", in, x)
			}
		}
		s := r.String()
		if len(s) > MaxLength {
			t.Fatalf("Parse(%q).String() = %q is longer than %d", in, s, MaxLength)
		}
		if strings.HasPrefix(s, "-") || strings.Contains(s, " -") {
			t.Fatalf("Parse(%q).String() = %q has a word starting with -", in, s)
		}
		if strings.ContainsAny(s, `@/\:#`) || strings.Contains(s, "  ") ||
			strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
			t.Fatalf("Parse(%q).String() = %q has a forbidden character or spacing", in, s)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f {
				t.Fatalf("Parse(%q).String() = %q has byte %#x", in, s, c)
			}
		}
		head, marker, hasMarker := strings.Cut(s, "; ")
		if strings.ContainsAny(head, " ;") || hasMarker != (r.Marker != "") || marker != r.Marker {
			t.Fatalf("Parse(%q).String() = %q: spaces or \";\" outside the marker", in, s)
		}
		if archiveSuffix(head) != "" || archiveSuffix(r.Key) != "" {
			t.Fatalf("Parse(%q).String() = %q reads as an archive file", in, s)
		}
		checkRoundTrip(t, r)
	})
}
