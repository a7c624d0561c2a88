package library

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Violation is one way a JSON value breaks its schema.
type Violation struct {
	// Pointer is the RFC 6901 JSON pointer of the failing value ("" for the whole value).
	Pointer string `json:"pointer"`
	// Message says what is wrong with it.
	Message string `json:"message"`
}

// InputError means a run's input breaks the code's input schema; nothing ran.
type InputError struct {
	Code       string
	Version    int
	Violations []Violation
}

// Is makes an InputError of class errclass.Invalid.
func (e *InputError) Is(target error) bool { return target == errclass.Invalid }

func (e *InputError) Error() string {
	return fmt.Sprintf("input does not match the input schema of code %q version %d: %s",
		e.Code, e.Version, describe(e.Violations))
}

// OutputError means a program's OUTPUT breaks the code's output schema. Its text is the reason
// of the output_invalid result.
type OutputError struct {
	Violations []Violation
}

func (e *OutputError) Error() string {
	return "OUTPUT does not match the output schema: " + describe(e.Violations)
}

func describe(vs []Violation) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		p := v.Pointer
		if p == "" {
			p = "(the whole value)"
		}
		parts[i] = fmt.Sprintf("at %s: %s", p, v.Message)
	}
	return strings.Join(parts, "; ")
}

// refusingLoader refuses every $ref outside the schema: schemas must be self-contained, and a
// schema must never make the daemon read a file or fetch a URL.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref %q points outside the schema; schemas must be self-contained (use $defs and \"#/$defs/...\")", url)
}

// Schema size limits: compiling and validating cost grows with both. MaxPatternBytes caps each
// regular expression (pattern, patternProperties, and a string checked as format "regex"):
// matching costs the pattern's size times the text's, and the validation budget counts the
// text.
const (
	MaxSchemaBytes  = 256 << 10
	MaxSchemaDepth  = 64
	MaxPatternBytes = 1 << 10
)

// patternEngine compiles a schema's regular expressions as the validator's default does (Go's
// regexp: RE2, linear in the text), refusing one over MaxPatternBytes.
func patternEngine(s string) (jsonschema.Regexp, error) {
	if len(s) > MaxPatternBytes {
		return nil, fmt.Errorf("the regular expression is %d bytes; the limit is %d bytes", len(s), MaxPatternBytes)
	}
	return regexp.Compile(s)
}

// compiled caches schemas by their text: runs of saved code reuse their compiled schemas. It
// holds at most compiledMax (it is emptied when full): with schemas of at most MaxSchemaBytes,
// its memory stays bounded whatever clients save.
var compiled = struct {
	sync.Mutex
	m map[[32]byte]*jsonschema.Schema
}{m: map[[32]byte]*jsonschema.Schema{}}

// compile compiles a JSON Schema (draft 2020-12 unless it names another in $schema), or
// returns it from the cache.
func compile(name string, raw []byte) (*jsonschema.Schema, error) {
	key := sha256.Sum256(append([]byte(name+"\x00"), raw...))
	compiled.Lock()
	sch := compiled.m[key]
	compiled.Unlock()
	if sch != nil {
		return sch, nil
	}
	sch, err := compileNew(name, raw)
	if err != nil {
		return nil, err
	}
	compiled.Lock()
	if len(compiled.m) >= compiledMax {
		clear(compiled.m)
	}
	compiled.m[key] = sch
	compiled.Unlock()
	return sch, nil
}

// compiledMax is how many compiled schemas the cache holds.
const compiledMax = 128

func compileNew(name string, raw []byte) (*jsonschema.Schema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("is %d bytes; the limit is %d bytes", len(raw), MaxSchemaBytes)
	}
	if d := sandbox.JSONDepth(raw); d > MaxSchemaDepth {
		return nil, fmt.Errorf("is nested %d levels deep; the limit is %d levels", d, MaxSchemaDepth)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, errors.New("must be a JSON Schema: an object such as {\"type\": \"object\"}, or true or false")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	c.UseRegexpEngine(patternEngine)
	url := "sandpit:///" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		var meta *jsonschema.SchemaValidationError
		var verr *jsonschema.ValidationError
		if errors.As(err, &meta) && errors.As(meta.Err, &verr) {
			return nil, fmt.Errorf("is not a valid JSON Schema (draft 2020-12): %s", describe(violations(verr)))
		}
		return nil, fmt.Errorf("is not a valid JSON Schema: %s", strings.ReplaceAll(err.Error(), url, name))
	}
	// A $ref cycle compiles, then fails every validation: find it now, not at each run. A
	// schema that costs too much to check even these small values is refused too (allOf of
	// two $refs to a schema that does the same, 30 levels deep, is a billion evaluations).
	for _, probe := range []any{nil, map[string]any{}, []any{}, "", 0.0, true} {
		if cost := validationCost(sch, probe, MaxValidationCost); cost > MaxValidationCost {
			return nil, fmt.Errorf("costs more than %d schema evaluations to check even %s (the validation budget); "+
				"nest fewer allOf, anyOf, oneOf and $ref inside each other", MaxValidationCost, describeProbe(probe))
		}
		for _, v := range violationsOf(check(sch, probe)) {
			if strings.Contains(v.Message, "reference cycle") {
				return nil, fmt.Errorf("has a $ref cycle (%s); every $ref must lead to a schema that does not lead back to it",
					strings.ReplaceAll(v.Message, url, ""))
			}
		}
	}
	return sch, nil
}

func describeProbe(v any) string {
	if v == nil {
		return "null"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// CostError means checking a value against a schema would cost more than MaxValidationCost;
// it was not checked.
type CostError struct {
	// Schema is input_schema or output_schema.
	Schema string
}

func (e *CostError) Error() string {
	return fmt.Sprintf("checking it against the %s would take more than %d schema evaluations (the validation budget, which bounds the daemon's work); "+
		"send a smaller value, or simplify the schema (fewer anyOf, oneOf and allOf branches nested inside each other and applied to every item)",
		e.Schema, MaxValidationCost)
}

// measured is a JSON value decoded for validation, with the cost of checking it.
type measured struct {
	doc  any
	cost int64
}

// measure decodes the JSON text v and bounds the cost of checking it against sch: a
// *CostError when over MaxValidationCost, violations when v is not JSON.
func measure(name string, sch *jsonschema.Schema, v []byte) (measured, []Violation, error) {
	// Decoding is work too (a million zeros take 100 MB as Go values): count the values in
	// the text first, and decode only what the budget allows.
	values := jsonValues(v, MaxValidationCost)
	if values > MaxValidationCost {
		return measured{}, nil, &CostError{Schema: name}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		return measured{}, []Violation{{Message: "is not valid JSON: " + err.Error()}}, nil
	}
	cost := values + validationCost(sch, doc, MaxValidationCost-values)
	if cost > MaxValidationCost {
		return measured{}, nil, &CostError{Schema: name}
	}
	return measured{doc: doc, cost: cost}, nil, nil
}

// validate checks the JSON text v against sch (name says which schema it is) and returns its
// violations, most specific first, or nil when it holds; a *CostError when that would cost too
// much.
func validate(name string, sch *jsonschema.Schema, v []byte) ([]Violation, error) {
	m, bad, err := measure(name, sch, v)
	if bad != nil || err != nil {
		return bad, err
	}
	return violationsOf(check(sch, m.doc)), nil
}

// check validates doc against sch. The validator panics on some values it cannot read (a
// number whose exponent is too large for an exact fraction, with minimum); that is a
// violation, never the daemon's end.
func check(sch *jsonschema.Schema, doc any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("could not be checked: the schema validator failed on this value (%v)", p)
		}
	}()
	return sch.Validate(doc)
}

// violationsOf turns a validation error into violations (nil for nil).
func violationsOf(err error) []Violation {
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Violation{{Message: err.Error()}}
	}
	vs := violations(verr)
	// Each message quotes values; keep the answer small for a large input.
	if len(vs) > maxViolations {
		vs = vs[:maxViolations]
	}
	for i := range vs {
		if len(vs[i].Message) > maxViolationText {
			vs[i].Message = strings.ToValidUTF8(vs[i].Message[:maxViolationText], "") + "…"
		}
	}
	return vs
}

// The most violations an error lists, and the longest message of each, in bytes.
const (
	maxViolations    = 20
	maxViolationText = 300
)

// violations returns the failures at the leaves of verr (the most specific ones), the first
// maxViolations of them, in order. It walks the error tree as it is: converting the whole tree
// to the validator's output format first would double its memory.
func violations(verr *jsonschema.ValidationError) []Violation {
	var out []Violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		for _, c := range e.Causes {
			if len(out) == maxViolations {
				return
			}
			if len(c.Causes) == 0 {
				leaf := *c // the unit alone, without its place in the tree
				if u := leaf.DetailedOutput(); u.Error != nil {
					out = append(out, Violation{Pointer: u.InstanceLocation, Message: u.Error.String()})
				}
				continue
			}
			walk(c)
		}
	}
	walk(verr)
	if len(out) == 0 {
		out = []Violation{{Message: verr.Error()}}
	}
	return out
}
