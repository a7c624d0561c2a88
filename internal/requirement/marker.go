package requirement

import (
	"fmt"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/suggest"
)

// markerVars are the environment marker variables of PEP 508 ("Environment Markers"). "extra"
// is the one PEP 508 allows only where a containing layer defines it; pip evaluates it as "".
var markerVars = []string{
	"python_version", "python_full_version", "os_name", "sys_platform", "platform_release",
	"platform_system", "platform_version", "platform_machine", "platform_python_implementation",
	"implementation_name", "implementation_version", "extra",
}

// legacyMarkerVars are the dotted names that PEP 345 used and some tools still accept. They
// are not PEP 508, so they are refused with the name to use instead.
var legacyMarkerVars = map[string]string{
	"os.name":                        "os_name",
	"sys.platform":                   "sys_platform",
	"platform.version":               "platform_version",
	"platform.machine":               "platform_machine",
	"platform.python_implementation": "platform_python_implementation",
	"python_implementation":          "platform_python_implementation",
}

// maxMarkerDepth bounds how deeply marker parentheses nest.
const maxMarkerDepth = 16

// markerHint is how a marker should look.
const markerHint = `write markers like "; python_version >= \"3.9\" and sys_platform == \"linux\""`

// markerNode is a parsed marker: a *markerCompare or a *markerBool.
type markerNode interface{ isMarker() }

// markerCompare is PEP 508 marker_expr = marker_var marker_op marker_var.
type markerCompare struct {
	lhs, rhs markerValue
	op       string // a version_cmp, "in" or "not in"
}

// markerBool is a chain of two or more nodes joined by one of "and", "or". Chains are kept
// flat: an "and" never holds an "and", nor an "or" an "or".
type markerBool struct {
	op   string
	kids []markerNode
}

func (*markerCompare) isMarker() {}
func (*markerBool) isMarker()    {}

// markerValue is PEP 508 marker_var: an env_var or a python_str.
type markerValue struct {
	variable bool
	text     string // the variable's name, or the string without its quotes
}

func (v markerValue) String() string {
	if v.variable {
		return v.text
	}
	return `"` + v.text + `"` // text holds no quote, see markerString
}

// formatMarker prints n canonically: single spaces between tokens, strings in double quotes,
// and parentheses only around an "or" inside an "and". In PEP 508 "and" binds tighter than
// "or" (marker_or = marker_and 'or' marker_and), so no other parentheses change the meaning.
func formatMarker(n markerNode, parent string) string {
	switch n := n.(type) {
	case *markerCompare:
		return n.lhs.String() + " " + n.op + " " + n.rhs.String()
	case *markerBool:
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = formatMarker(k, n.op)
		}
		s := strings.Join(parts, " "+n.op+" ")
		if parent == "and" && n.op == "or" {
			s = "(" + s + ")"
		}
		return s
	}
	panic("requirement: unknown marker node")
}

// marker parses PEP 508 quoted_marker = ';' wsp* marker, the ';' already consumed, and returns
// the marker in canonical form.
func (p *parser) marker() (string, error) {
	p.spaces()
	if p.pos == len(p.s) {
		return "", p.failAt(p.pos, `expected an environment marker after ";"`, markerHint)
	}
	n, err := p.markerChain("or", 0)
	if err != nil {
		return "", err
	}
	return formatMarker(n, ""), nil
}

// markerChain parses PEP 508 marker_or (op "or": marker_and joined by "or") or marker_and (op
// "and": marker_expr joined by "and"). Like the reference implementation (packaging), it takes
// chains of any length, not just the two operands the grammar spells out.
func (p *parser) markerChain(op string, depth int) (markerNode, error) {
	var kids []markerNode
	for {
		var k markerNode
		var err error
		if op == "or" {
			k, err = p.markerChain("and", depth)
		} else {
			k, err = p.markerExpr(depth)
		}
		if err != nil {
			return nil, err
		}
		if b, ok := k.(*markerBool); ok && b.op == op {
			kids = append(kids, b.kids...) // "(a or b) or c" is "a or b or c"
		} else {
			kids = append(kids, k)
		}
		p.spaces()
		if !p.keyword(op) {
			break
		}
	}
	if len(kids) == 1 {
		return kids[0], nil
	}
	return &markerBool{op: op, kids: kids}, nil
}

// markerExpr parses PEP 508 marker_expr = marker_var marker_op marker_var | wsp* '(' marker
// wsp* ')'.
func (p *parser) markerExpr(depth int) (markerNode, error) {
	p.spaces()
	if p.peek('(') {
		if depth >= maxMarkerDepth {
			return nil, p.failAt(p.pos, fmt.Sprintf("the marker nests parentheses more than %d deep", maxMarkerDepth), markerHint)
		}
		p.pos++
		n, err := p.markerChain("or", depth+1)
		if err != nil {
			return nil, err
		}
		p.spaces()
		if !p.peek(')') {
			return nil, p.failAt(p.pos, `expected "and", "or" or ")" in the marker, found `+p.found(), markerHint)
		}
		p.pos++
		return n, nil
	}
	start := p.pos
	lhs, err := p.markerValue()
	if err != nil {
		return nil, err
	}
	p.spaces()
	opStart := p.pos
	op := p.markerOp()
	if op == "" {
		return nil, p.failAt(p.pos, `expected a comparison (==, !=, <, <=, >, >=, ~=, ===, in, not in) in the marker, found `+p.found(), markerHint)
	}
	p.spaces()
	rhs, err := p.markerValue()
	if err != nil {
		return nil, err
	}
	// PEP 508's grammar lets either side be a variable or a string. A comparison that does not
	// set a variable against a string is constant or meaningless, so it is refused.
	if lhs.variable == rhs.variable {
		what := "two strings"
		if lhs.variable {
			what = "two marker variables"
		}
		return nil, p.failAt(start, "the marker compares "+what, `compare a variable with a quoted value, like python_version >= "3.9"; `+markerHint)
	}
	// The ordering operators compare versions (PEP 508, "Environment Markers": "the <version_cmp>
	// operators use the PEP 440 version comparison rules"); on anything that is not a PEP 440
	// version pip falls back to comparing strings, or fails, so the value must be a version.
	switch op {
	case "<", "<=", ">", ">=", "~=":
		v := lhs.text
		if lhs.variable {
			v = rhs.text
		}
		if reason := checkVersion(op, v); reason != "" {
			return nil, p.failAt(opStart, "in the marker, "+reason, `compare versions like python_version >= "3.9"`)
		}
	}
	return &markerCompare{lhs: lhs, op: op, rhs: rhs}, nil
}

// markerOp parses PEP 508 marker_op = version_cmp | (wsp* 'in') | (wsp* 'not' wsp+ 'in') and
// returns it ("not in" with one space), or "" leaving the cursor alone.
func (p *parser) markerOp() string {
	if op := p.versionOp(); op != "" {
		return op
	}
	if p.keyword("in") {
		return "in"
	}
	start := p.pos
	if p.keyword("not") {
		if p.peek(' ') {
			p.spaces()
			if p.keyword("in") {
				return "not in"
			}
		}
		p.pos = start
	}
	return ""
}

// keyword consumes word if it is the whole word at the cursor.
func (p *parser) keyword(word string) bool {
	end := p.pos
	for end < len(p.s) && isWordByte(p.s[end]) {
		end++
	}
	if p.s[p.pos:end] != word {
		return false
	}
	p.pos = end
	return true
}

// markerValue parses PEP 508 marker_var = wsp* (env_var | python_str).
func (p *parser) markerValue() (markerValue, error) {
	p.spaces()
	if p.peek('"') || p.peek('\'') {
		return p.markerString()
	}
	start := p.pos
	w := p.scan(isWordByte)
	if w == "" {
		return markerValue{}, p.failAt(p.pos, `expected a marker variable like python_version or a quoted value, found `+p.found(), markerHint)
	}
	for _, v := range markerVars {
		if w == v {
			return markerValue{variable: true, text: w}, nil
		}
	}
	hint := "the PEP 508 marker variables are " + strings.Join(markerVars, ", ")
	if v, ok := legacyMarkerVars[w]; ok {
		hint = fmt.Sprintf("write %s instead (PEP 508)", v)
	} else if v := suggest.Nearest(w, markerVars, 3); v != "" {
		hint = fmt.Sprintf("did you mean %s?", v)
	}
	return markerValue{}, p.failAt(start, fmt.Sprintf("%q is not a marker variable", w), hint)
}

// markerString parses PEP 508 python_str, a string in single or double quotes. PEP 508 allows
// most printable characters in it; this gate allows only letters, digits and . - _ * + ! ~,
// which is enough for the values markers compare against (versions such as "3.9.*", platform
// names such as "linux" or "x86_64"), and keeps spaces, quotes, "#", ";" and "-" after a space
// out of what pip reads.
func (p *parser) markerString() (markerValue, error) {
	q := p.s[p.pos]
	start := p.pos
	p.pos++
	text := p.scan(func(c byte) bool { return c != q })
	if !p.peek(q) {
		return markerValue{}, p.failAt(start, "the marker has a string with no closing quote", markerHint)
	}
	p.pos++
	for i := 0; i < len(text); i++ {
		c := text[i]
		if isAlnum(c) || strings.IndexByte("._*+!~-", c) >= 0 {
			continue
		}
		hint := "marker values may hold only letters, digits and . - _ * + ! ~"
		if c == ' ' {
			hint = `marker values may not hold spaces: write sys_platform == "linux" or sys_platform == "darwin", not sys_platform in "linux darwin"`
		}
		return markerValue{}, p.failAt(start+1+i, fmt.Sprintf("the marker value %q holds %q", text, string(c)), hint)
	}
	return markerValue{text: text}, nil
}
