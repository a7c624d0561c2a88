// Package requirement parses and checks the Python dependency strings that agents send (for
// example "pandas==2.2.2", "requests>=2", "rich[jupyter]") before they reach pip.
//
// It is a security gate as much as a parser: an entry is accepted only if it is a plain
// requirement on a package from the index. Everything else that pip would also take on its
// command line or in a requirements file is refused: options ("--index-url=...", "-e .",
// "-r file"), URLs and direct references ("name @ https://..."), local paths and archive
// names, and anything with control characters, non-ASCII text or more than MaxLength bytes.
//
// The accepted grammar is the name_req form of PEP 508 (https://peps.python.org/pep-0508/):
//
//	name [extras] [version specifiers] [; environment marker]
//
// with version specifiers checked against PEP 440 (https://peps.python.org/pep-0440/), names
// normalised per PEP 503 (https://peps.python.org/pep-0503/) and extras per PEP 685
// (https://peps.python.org/pep-0685/). Where PEP 508 is looser than a gate should be, this
// package is stricter, and says so in the comments: the only whitespace is the space, and
// quoted strings in markers hold letters, digits and . - _ * + ! ~ only.
//
// A parsed Requirement prints (String) in one canonical form, so two spellings of the same
// requirement print the same, and the printed form parses back to the same Requirement.
package requirement

import (
	"fmt"
	"regexp"
	"strings"
)

const (
	// MaxLength is the longest entry, in bytes, that Parse accepts. Real requirements are far
	// shorter; the limit keeps error messages, logs and the parser's work small.
	MaxLength = 256

	// MaxEntries is the number of entries ParseList accepts when the caller passes no limit.
	MaxEntries = 50
)

// Requirement is one parsed PEP 508 requirement on a package from the index.
type Requirement struct {
	Name      string   // as written, e.g. "Foo_Bar"
	Key       string   // PEP 503 normalised name, e.g. "foo-bar"
	Extras    []string // PEP 685 normalised, sorted, without duplicates; nil when none
	Specifier string   // PEP 440 clauses joined by "," without spaces, e.g. ">=2,<3"; "" when none
	Marker    string   // canonical PEP 508 marker, e.g. `python_version >= "3.9"`; "" when none
}

// String returns the requirement in canonical PEP 508 form, which pip accepts as one argument
// or one requirements-file line: the normalised name (Key), extras in brackets, the specifier,
// and "; " before the marker, e.g. `foo-bar[x,y]>=2,<3; python_version >= "3.8"`. The only
// spaces are the ones around "; " and between marker tokens, and no token starts with "-".
//
// Parse(r.String()) returns r with Name set to Key; its String is the same text.
func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.Key)
	if len(r.Extras) > 0 {
		b.WriteByte('[')
		b.WriteString(strings.Join(r.Extras, ","))
		b.WriteByte(']')
	}
	b.WriteString(r.Specifier)
	if r.Marker != "" {
		b.WriteString("; ")
		b.WriteString(r.Marker)
	}
	return b.String()
}

// nameRE is the name rule of PEP 508 ("Names"), applied case-insensitively.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)

// separatorRunRE matches what PEP 503 ("Normalized Names") folds into one "-".
var separatorRunRE = regexp.MustCompile(`[-_.]+`)

// Normalize returns the PEP 503 normalised form of a project name: lower case, with each run of
// "-", "_" and "." replaced by one "-". "Foo_Bar", "foo.bar" and "FOO--bar" all become
// "foo-bar". PEP 685 normalises extra names the same way. Normalize does not check that name is
// valid; Parse does.
func Normalize(name string) string {
	return separatorRunRE.ReplaceAllString(strings.ToLower(name), "-")
}

// Error reports why one entry was refused. Its message is the quoted entry followed by Reason,
// which says what is wrong and how to fix it, e.g.
//
//	"git+https://x" is a URL: name a package from the index instead, like "requests>=2"
type Error struct {
	Entry  string // the refused entry, as given
	Reason string // starts with a verb ("is a URL: ..."), lower case
}

func (e *Error) Error() string { return quote(e.Entry) + " " + e.Reason }

// ListError reports the entry of a list that ParseList refused. Index is the entry's position
// (from 0), or -1 when the list as a whole was refused (too many entries); Entry is the entry
// as given ("" when Index is -1); Err is an *Error for entries, and says why.
type ListError struct {
	Index int
	Entry string
	Err   error
}

func (e *ListError) Error() string {
	if e.Index < 0 {
		return "dependencies: " + e.Err.Error()
	}
	return fmt.Sprintf("dependencies[%d] %v", e.Index, e.Err)
}

func (e *ListError) Unwrap() error { return e.Err }

// example is the shape every "how to fix it" message points to.
const example = `write it like "name[extra]>=1.0,<2; python_version >= \"3.9\""`

// Parse parses one requirement string, or returns an *Error saying why it was refused.
//
// Accepted, per PEP 508 ("Grammar", name_req form): a name; optional extras in brackets; optional
// PEP 440 version specifiers (~= == != <= >= < > ===), comma-separated, optionally in
// parentheses, with ".*" wildcards only after == and !=; optional environment markers after
// ";", using the PEP 508 marker variables, operators, "and", "or", parentheses and quoted
// strings. Spaces may appear between tokens and around the entry.
//
// Refused: empty entries; control characters (tab, newline, NUL and so on); non-ASCII; more than
// MaxLength bytes; pip options (anything starting with "-"); URLs and direct references
// ("name @ url", anything with "@"); file paths (anything with "/" or "\", or starting with "."
// or "~") and names or versions that pip would read as an archive file ("x.whl", "x.tar.gz");
// and anything else outside the grammar.
func Parse(s string) (Requirement, error) {
	if reason := screen(s); reason != "" {
		return Requirement{}, &Error{Entry: s, Reason: reason}
	}
	p := &parser{s: s}
	r, err := p.requirement()
	if err != nil {
		return Requirement{}, &Error{Entry: s, Reason: err.Error()}
	}
	if ext := archiveSuffix(r.Name); ext != "" {
		return Requirement{}, &Error{Entry: s, Reason: fmt.Sprintf(
			"has a name ending in %q, which pip reads as a local archive file: name a package from the index, like \"requests\"", ext)}
	}
	// pip also reads the text before ";" as a path when it ends like an archive, and a
	// specifier ends with a version, whose PEP 440 local part may be, e.g., "+x.whl".
	if ext := archiveSuffix(r.Specifier); ext != "" {
		return Requirement{}, &Error{Entry: s, Reason: fmt.Sprintf(
			"has a version ending in %q, which pip reads as a local archive file: use a release version, like \"==1.2.3\"", ext)}
	}
	return r, nil
}

// ParseList parses the entries of one request, in order, and refuses the list if it has more
// than max entries (max <= 0 means MaxEntries), if any entry is refused by Parse, or if two
// entries name the same package after PEP 503 normalisation ("Foo_Bar" and "foo-bar"). The error
// is a *ListError for the first problem found. An empty list gives an empty result.
func ParseList(entries []string, max int) ([]Requirement, error) {
	if max <= 0 {
		max = MaxEntries
	}
	if len(entries) > max {
		return nil, &ListError{Index: -1, Err: fmt.Errorf(
			"%d entries are more than the limit of %d: ask for fewer packages (their own dependencies are installed without being listed)",
			len(entries), max)}
	}
	out := make([]Requirement, 0, len(entries))
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		r, err := Parse(e)
		if err != nil {
			return nil, &ListError{Index: i, Entry: e, Err: err}
		}
		if j, dup := seen[r.Key]; dup {
			return nil, &ListError{Index: i, Entry: e, Err: &Error{Entry: e, Reason: fmt.Sprintf(
				"names the same package as dependencies[%d] %s (both are %q after PEP 503 normalisation): list each package once, with all its version limits in one entry, like \"%s>=1,<2\"",
				j, quote(entries[j]), r.Key, r.Key)}}
		}
		seen[r.Key] = i
		out = append(out, r)
	}
	return out, nil
}

// schemeRE matches a URL scheme at the start of an entry ("https:", "git+ssh:", "file:").
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// screen refuses, with a specific reason, the kinds of entry that must never reach pip: those it
// would read as something other than a requirement on an index package, and text that has no
// business in a requirement. It returns "" when s may go on to the grammar.
func screen(s string) string {
	if len(s) > MaxLength {
		return fmt.Sprintf("is %d bytes long, more than the limit of %d: give just the package name and version limits, like \"requests>=2\"", len(s), MaxLength)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return "contains a NUL byte: give just the package name and version limits, like \"requests>=2\""
		case c == '\n' || c == '\r':
			return "contains a line break: put each requirement in its own list entry"
		case c == '\t':
			return "contains a tab: use spaces, or none, between the parts of a requirement"
		case c < 0x20 || c == 0x7f:
			return fmt.Sprintf("contains the control character %q: remove it", rune(c))
		case c >= 0x80:
			return "contains non-ASCII text: package names, versions and markers are ASCII (check for look-alike letters and typographic quotes)"
		}
	}
	t := strings.Trim(s, " ")
	switch {
	case t == "":
		return "is empty: give a package name, like \"requests\", or remove the entry"
	case t[0] == '-':
		return "is a pip option, not a requirement: options such as --index-url, -e and -r are not allowed; give a package name, like \"requests>=2\""
	case strings.Contains(t, " -"):
		return "contains a pip option (a word starting with \"-\"): options such as --hash or --index-url are not allowed; give only the requirement, like \"requests>=2\""
	case strings.Contains(t, "@"):
		return "is a direct reference (\"name @ URL\"): only packages from the index are allowed; pin a released version instead, like \"requests==2.32.3\""
	case strings.Contains(t, "://"):
		return "is a URL: name a package from the index instead, like \"requests>=2\""
	case strings.ContainsAny(t, `/\`) || t[0] == '.' || t[0] == '~':
		return "is a file path: only packages from the index are allowed; name one instead, like \"requests>=2\""
	case schemeRE.MatchString(t):
		return "is a URL: name a package from the index instead, like \"requests>=2\""
	}
	return ""
}

// archiveExtensions are the endings pip treats as archive files (pip/_internal/utils/filetypes.py,
// ARCHIVE_EXTENSIONS): a requirement whose text before ";" ends so is taken as a local file.
var archiveExtensions = []string{
	".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz",
	".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma",
}

// archiveSuffix returns the archive extension that s ends with, ignoring case, or "".
func archiveSuffix(s string) string {
	l := strings.ToLower(s)
	for _, ext := range archiveExtensions {
		if strings.HasSuffix(l, ext) {
			return ext
		}
	}
	return ""
}

// quote quotes an entry for a message, cutting it short so that an over-long entry does not
// flood the message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
