package library

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Checking a JSON value against a schema is bounded before it starts. The validator evaluates
// every branch of anyOf, allOf and oneOf, every item and property, and builds the whole tree of
// failures before the first 20 are kept; a small schema can so make a small input cost without
// bound (anyOf inside anyOf, applied to every item: 40 000 items cost 3.4 million evaluations
// and 2.4 GB). validationCost walks the value and the schema together, as the validator would,
// and adds up an upper bound of its work; a value over MaxValidationCost is refused unchecked.
//
// The unit is about one schema evaluation (a microsecond or two, and at most a few hundred
// bytes of failure when it fails). Each evaluation of a schema on a value costs 1, plus the
// value's length when it is an array or object (the validator copies and scans it), plus the
// length of a string it matches patterns or formats against (in 64-byte steps), plus the
// parsing of a number as an exact fraction (which grows with the square of its digits and
// exponent), plus the size of the value for enum, const and uniqueItems (deep comparisons).
const (
	// MaxValidationCost is the most work one validation may need, in evaluations.
	MaxValidationCost = 400_000
	// heldCost is the cost above which a validation waits for an execution slot first, so that
	// large validations are bounded by the slots and the queue like runs.
	heldCost = 20_000
	// maxCostDepth bounds the walk's recursion (a value nests at most 500 levels, a schema 64;
	// $ref chains add more).
	maxCostDepth = 10_000
)

// validationCost returns an upper bound of the work of validating x against sch, in the units
// above. It stops early, returning more than limit, once the bound passes limit; its own work is
// bounded by limit too.
func validationCost(sch *jsonschema.Schema, x any, limit int64) int64 {
	c := coster{left: limit, root: sch}
	c.eval(sch, x)
	return limit - c.left
}

type coster struct {
	root *jsonschema.Schema
	left int64 // budget left; negative once over
	// stack holds the schemas being applied, outermost first; those from base on apply to the
	// current value.
	stack   []*jsonschema.Schema
	base    int
	anchors map[string][]*jsonschema.Schema // dynamic anchors by name, found when needed
	recurse []*jsonschema.Schema            // schemas with $recursiveAnchor, found when needed
	found   bool
}

func (c *coster) charge(n int64) bool {
	c.left -= n
	return c.left >= 0
}

// eval charges the evaluation of s on x and everything it evaluates; false once over budget.
func (c *coster) eval(s *jsonschema.Schema, x any) bool {
	if s == nil {
		return true
	}
	if !c.charge(1) {
		return false
	}
	if s.Bool != nil {
		return true
	}
	// A schema already being applied to this same value is a $ref cycle: the validator stops
	// there with an error.
	if !c.charge(int64(len(c.stack) - c.base)) {
		return false
	}
	if slices.Contains(c.stack[c.base:], s) {
		return true
	}
	if len(c.stack) >= maxCostDepth {
		c.left = -1
		return false
	}
	c.stack = append(c.stack, s)
	defer func() { c.stack = c.stack[:len(c.stack)-1] }()

	// Subschemas applied to x itself.
	same := []*jsonschema.Schema{s.Ref, s.Not, s.If, s.Then, s.Else}
	same = append(same, s.AllOf...)
	same = append(same, s.AnyOf...)
	same = append(same, s.OneOf...)
	if s.RecursiveRef != nil || s.DynamicRef != nil {
		same = append(same, c.dynamicTargets(s)...)
	}
	for _, sub := range same {
		if !c.eval(sub, x) {
			return false
		}
	}
	if (s.Enum != nil || s.Const != nil) && !c.charge(int64(1+enumLen(s.Enum))*size(x, c.left)) {
		return false
	}
	switch v := x.(type) {
	case map[string]any:
		return c.object(s, v)
	case []any:
		return c.array(s, v)
	case string:
		if s.Pattern != nil || s.Format != nil || s.MinLength != nil || s.MaxLength != nil || s.ContentEncoding != nil {
			if !c.charge(int64(len(v) / 64)) {
				return false
			}
		}
		if s.ContentSchema != nil && s.ContentMediaType != nil {
			// The decoded content is a JSON document of at most len(v) values, each checked
			// against the content schema at most once per subschema.
			return c.charge(int64(len(v)) * int64(countSchemas(s.ContentSchema, c.left)))
		}
	case json.Number:
		return c.charge(numberCost(string(v)))
	}
	return true
}

// child charges the evaluation of s on x, a value inside the current one.
func (c *coster) child(s *jsonschema.Schema, x any) bool {
	base := c.base
	c.base = len(c.stack)
	ok := c.eval(s, x)
	c.base = base
	return ok
}

func (c *coster) object(s *jsonschema.Schema, obj map[string]any) bool {
	if !c.charge(int64(len(obj) + len(s.Required))) {
		return false
	}
	for name, dep := range s.Dependencies {
		if _, present := obj[name]; !present {
			continue
		}
		if sub, ok := dep.(*jsonschema.Schema); ok && !c.eval(sub, obj) {
			return false
		}
	}
	for name, sub := range s.DependentSchemas {
		if _, ok := obj[name]; ok && !c.eval(sub, obj) {
			return false
		}
	}
	for _, req := range s.DependentRequired {
		if !c.charge(int64(len(req))) {
			return false
		}
	}
	for name, value := range obj {
		evaluated := false
		if sub, ok := s.Properties[name]; ok {
			evaluated = true
			if !c.child(sub, value) {
				return false
			}
		}
		for re, sub := range s.PatternProperties {
			if !c.charge(int64(1 + len(name)/64)) {
				return false
			}
			if re.MatchString(name) {
				evaluated = true
				if !c.child(sub, value) {
					return false
				}
			}
		}
		if sub, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !evaluated && !c.child(sub, value) {
			return false
		}
		if !c.child(s.UnevaluatedProperties, value) || !c.child(s.PropertyNames, name) {
			return false
		}
	}
	return true
}

func (c *coster) array(s *jsonschema.Schema, arr []any) bool {
	if !c.charge(int64(len(arr))) {
		return false
	}
	if s.UniqueItems && !c.charge(size(arr, c.left)) {
		return false
	}
	for i, item := range arr {
		var sub *jsonschema.Schema
		switch items := s.Items.(type) { // drafts before 2020-12
		case *jsonschema.Schema:
			sub = items
		case []*jsonschema.Schema:
			if i < len(items) {
				sub = items[i]
			} else if more, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
				sub = more
			}
		}
		if i < len(s.PrefixItems) {
			sub = s.PrefixItems[i]
		} else if s.Items2020 != nil {
			sub = s.Items2020
		}
		if !c.child(sub, item) || !c.child(s.Contains, item) || !c.child(s.UnevaluatedItems, item) {
			return false
		}
	}
	return true
}

// dynamicTargets returns every schema a $recursiveRef or $dynamicRef of s may resolve to: its
// static target and each schema with a matching anchor (which one applies depends on the
// path taken; all are charged).
func (c *coster) dynamicTargets(s *jsonschema.Schema) []*jsonschema.Schema {
	if !c.found {
		c.found, c.anchors = true, map[string][]*jsonschema.Schema{}
		walkSchemas(c.root, func(sub *jsonschema.Schema) bool {
			if sub.DynamicAnchor != "" {
				c.anchors[sub.DynamicAnchor] = append(c.anchors[sub.DynamicAnchor], sub)
			}
			if sub.RecursiveAnchor {
				c.recurse = append(c.recurse, sub)
			}
			return c.charge(1)
		})
	}
	var out []*jsonschema.Schema
	if s.RecursiveRef != nil {
		out = append(append(out, s.RecursiveRef), c.recurse...)
	}
	if d := s.DynamicRef; d != nil {
		out = append(out, d.Ref)
		if d.Anchor != "" {
			out = append(out, c.anchors[d.Anchor]...)
		}
	}
	return out
}

// walkSchemas calls fn on every schema reachable from s (through subschemas and references),
// once each, while fn returns true.
func walkSchemas(s *jsonschema.Schema, fn func(*jsonschema.Schema) bool) {
	seen := map[*jsonschema.Schema]bool{}
	stack := []*jsonschema.Schema{s}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s == nil || seen[s] {
			continue
		}
		seen[s] = true
		if !fn(s) {
			return
		}
		stack = append(stack, children(s)...)
	}
}

// children lists the schemas s refers to directly.
func children(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else, s.PropertyNames,
		s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(append(append(append(out, s.AllOf...), s.AnyOf...), s.OneOf...), s.PrefixItems...)
	for _, sub := range s.Properties {
		out = append(out, sub)
	}
	for _, sub := range s.PatternProperties {
		out = append(out, sub)
	}
	for _, sub := range s.DependentSchemas {
		out = append(out, sub)
	}
	for _, dep := range s.Dependencies {
		if sub, ok := dep.(*jsonschema.Schema); ok {
			out = append(out, sub)
		}
	}
	for _, v := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch v := v.(type) {
		case *jsonschema.Schema:
			out = append(out, v)
		case []*jsonschema.Schema:
			out = append(out, v...)
		}
	}
	return out
}

// countSchemas returns how many schemas are reachable from s, at most limit+1.
func countSchemas(s *jsonschema.Schema, limit int64) int64 {
	var n int64
	walkSchemas(s, func(*jsonschema.Schema) bool { n++; return n <= limit })
	return n
}

func enumLen(e *jsonschema.Enum) int {
	if e == nil {
		return 0
	}
	return len(e.Values)
}

// size returns how many values x holds (itself included), at most limit+1.
func size(x any, limit int64) int64 {
	n := int64(1)
	switch v := x.(type) {
	case map[string]any:
		for _, e := range v {
			if n > limit {
				break
			}
			n += size(e, limit-n)
		}
	case []any:
		for _, e := range v {
			if n > limit {
				break
			}
			n += size(e, limit-n)
		}
	case string:
		n += int64(len(v) / 64)
	}
	return n
}

// numberCost is the work of reading the JSON number text as an exact fraction, as the
// validator does for minimum, maximum, multipleOf and integer types: it grows with the square
// of the digits and of the exponent (1e1000000 takes tens of milliseconds, and an exponent
// over about ten million fails, which the validator does not survive).
func numberCost(text string) int64 {
	mant, exp, _ := strings.Cut(strings.ToLower(text), "e")
	e, err := strconv.ParseInt(strings.TrimPrefix(exp, "+"), 10, 64)
	if (err != nil && exp != "") || e > 1e9 || e < -1e9 {
		return math.MaxInt64 / 2
	}
	n := int64(len(mant)) + max(e, -e)
	return 1 + n*n/20_000
}

// jsonValues returns an upper bound of how many values the JSON text holds (one, plus one for
// each comma, colon and opening bracket outside strings), at most limit+1, without decoding it.
func jsonValues(text []byte, limit int64) int64 {
	n := int64(1)
	inString, escaped := false, false
	for _, b := range text {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == ',' || b == ':' || b == '[' || b == '{':
			if n++; n > limit {
				return n
			}
		}
	}
	return n
}
