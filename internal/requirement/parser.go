package requirement

import (
	"fmt"
	"slices"
	"strings"
)

// parser is a cursor over one entry that has passed screen: printable ASCII, no "@", "/", "\",
// no tab and no line break. It follows the name_req rule of the PEP 508 grammar ("Grammar"):
//
//	name_req = name wsp* extras? wsp* versionspec? wsp* quoted_marker?
//
// with leading and trailing wsp allowed (the specification rule). wsp is only the space here:
// PEP 508 also allows tab, but screen refuses control characters, tab included.
type parser struct {
	s   string
	pos int
}

// fail returns a syntax error at the cursor.
func (p *parser) fail(what string) error { return p.failAt(p.pos, what, example) }

// failAt returns a syntax error at byte pos, with a hint on how to fix it.
func (p *parser) failAt(pos int, what, hint string) error {
	return fmt.Errorf("is not a valid requirement: %s (column %d); %s", what, pos+1, hint)
}

// found describes what is at the cursor, for messages.
func (p *parser) found() string {
	if p.pos >= len(p.s) {
		return "the end"
	}
	return fmt.Sprintf("%q", p.s[p.pos:p.pos+1])
}

func (p *parser) spaces() {
	for p.pos < len(p.s) && p.s[p.pos] == ' ' {
		p.pos++
	}
}

func (p *parser) peek(c byte) bool { return p.pos < len(p.s) && p.s[p.pos] == c }

// scan advances over the bytes for which ok holds and returns them.
func (p *parser) scan(ok func(byte) bool) string {
	start := p.pos
	for p.pos < len(p.s) && ok(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isNameByte reports whether c may appear in a PEP 508 identifier (name or extra).
func isNameByte(c byte) bool { return isAlnum(c) || c == '-' || c == '_' || c == '.' }

// isVersionByte reports whether c may appear in a PEP 508 version:
// letterOrDigit | '-' | '_' | '.' | '*' | '+' | '!'.
func isVersionByte(c byte) bool { return isNameByte(c) || c == '*' || c == '+' || c == '!' }

// isWordByte reports whether c may appear in a marker keyword or variable name. Marker words
// end at a word boundary, as in the reference implementation (packaging's tokenizer), so
// "python_versionin" is one unknown word, not "python_version" and "in".
func isWordByte(c byte) bool { return isAlnum(c) || c == '_' || c == '.' }

// requirement parses the whole entry.
func (p *parser) requirement() (Requirement, error) {
	p.spaces()
	start := p.pos
	name := p.scan(isNameByte)
	if name == "" {
		return Requirement{}, p.fail("expected a package name, found " + p.found())
	}
	if !nameRE.MatchString(name) {
		return Requirement{}, p.failAt(start, fmt.Sprintf("%q is not a valid package name", name),
			"names use letters, digits, '.', '-' and '_', and start and end with a letter or digit (PEP 508)")
	}
	r := Requirement{Name: name, Key: Normalize(name)}
	p.spaces()
	expect := `"[extras]", a version like ">=1.0", or ";" and a marker`
	if p.peek('[') {
		extras, err := p.extras()
		if err != nil {
			return Requirement{}, err
		}
		r.Extras = extras
		p.spaces()
		expect = `a version like ">=1.0", or ";" and a marker`
	}
	if p.peek('(') || p.pos < len(p.s) && strings.IndexByte("<>=!~", p.s[p.pos]) >= 0 {
		spec, paren, err := p.specifier()
		if err != nil {
			return Requirement{}, err
		}
		r.Specifier = spec
		p.spaces()
		expect = `"," and another version clause, or ";" and a marker`
		if paren {
			expect = `";" and a marker`
		}
	}
	if p.peek(';') {
		p.pos++
		marker, err := p.marker()
		if err != nil {
			return Requirement{}, err
		}
		r.Marker = marker
		expect = `"and", "or", or the end of the marker`
	}
	p.spaces()
	if p.pos < len(p.s) {
		return Requirement{}, p.fail("expected " + expect + ", found " + p.found())
	}
	if n := len(r.String()); n > MaxLength {
		// The canonical form can be longer than the entry (it spaces out markers); it must
		// stay within the limit so that it parses again.
		return Requirement{}, fmt.Errorf("is %d bytes long once written in canonical form, more than the limit of %d: shorten the marker", n, MaxLength)
	}
	return r, nil
}

// extras parses PEP 508 extras = '[' wsp* extras_list? wsp* ']', extras_list = identifier
// (wsp* ',' wsp* identifier)*, and returns the names normalised (PEP 685), sorted, without
// duplicates; nil for "[]".
func (p *parser) extras() ([]string, error) {
	p.pos++ // '['
	p.spaces()
	var extras []string
	if !p.peek(']') {
		for {
			p.spaces()
			start := p.pos
			e := p.scan(isNameByte)
			if e == "" {
				return nil, p.fail("expected an extra name in the brackets, found " + p.found())
			}
			if !nameRE.MatchString(e) {
				return nil, p.failAt(start, fmt.Sprintf("%q is not a valid extra name", e),
					"extra names use letters, digits, '.', '-' and '_', and start and end with a letter or digit (PEP 508)")
			}
			extras = append(extras, Normalize(e))
			p.spaces()
			if p.peek(',') {
				p.pos++
				continue
			}
			if p.peek(']') {
				break
			}
			return nil, p.fail(`expected "," or "]" after the extra name, found ` + p.found())
		}
	}
	p.pos++ // ']'
	slices.Sort(extras)
	return slices.Compact(extras), nil
}

// specifier parses PEP 508 versionspec = ('(' version_many ')') | version_many, where
// version_many = version_one (wsp* ',' version_one)* and version_one = wsp* version_cmp wsp*
// version wsp*, checking each version against PEP 440 for its operator. It returns the clauses
// joined by "," without spaces, and whether they were in parentheses.
func (p *parser) specifier() (string, bool, error) {
	paren := p.peek('(')
	if paren {
		p.pos++
	}
	var clauses []string
	for {
		p.spaces()
		op := p.versionOp()
		if op == "" {
			return "", false, p.fail("expected a version operator (~=, ==, !=, <=, >=, <, >, ===), found " + p.found())
		}
		p.spaces()
		start := p.pos
		v := p.scan(isVersionByte)
		if reason := checkVersion(op, v); reason != "" {
			return "", false, p.failAt(start, reason, `write versions like ">=1.0,<2" or "==2.2.*" (PEP 440)`)
		}
		clauses = append(clauses, op+v)
		p.spaces()
		if !p.peek(',') {
			break
		}
		p.pos++
	}
	if paren {
		if !p.peek(')') {
			return "", false, p.fail(`expected "," or ")" after the version, found ` + p.found())
		}
		p.pos++
	}
	return strings.Join(clauses, ","), paren, nil
}

// versionOps are the PEP 440 comparison operators ("Version specifiers"), longest first so
// that "===" is not read as "==" and "<=" not as "<".
var versionOps = []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"}

// versionOp consumes and returns the comparison operator at the cursor, or "".
func (p *parser) versionOp() string {
	for _, op := range versionOps {
		if strings.HasPrefix(p.s[p.pos:], op) {
			p.pos += len(op)
			return op
		}
	}
	return ""
}
