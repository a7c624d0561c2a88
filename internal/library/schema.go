package library

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"

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

// Schema size limits: compiling and validating cost grows with both.
const (
	MaxSchemaBytes = 256 << 10
	MaxSchemaDepth = 64
)

// compiled caches schemas by their text: runs of saved code reuse their compiled schemas.
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
	if len(compiled.m) >= 1024 {
		clear(compiled.m)
	}
	compiled.m[key] = sch
	compiled.Unlock()
	return sch, nil
}

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
	// A $ref cycle compiles, then fails every validation: find it now, not at each run.
	for _, probe := range []any{nil, map[string]any{}, []any{}, "", 0.0, true} {
		for _, v := range violationsOf(sch.Validate(probe)) {
			if strings.Contains(v.Message, "reference cycle") {
				return nil, fmt.Errorf("has a $ref cycle (%s); every $ref must lead to a schema that does not lead back to it",
					strings.ReplaceAll(v.Message, url, ""))
			}
		}
	}
	return sch, nil
}

// validate checks the JSON text v against sch and returns its violations, most specific first,
// or nil when it holds.
func validate(sch *jsonschema.Schema, v []byte) []Violation {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		return []Violation{{Message: "is not valid JSON: " + err.Error()}}
	}
	return violationsOf(sch.Validate(doc))
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

// violations flattens verr into the failures at its leaves: the most specific ones.
func violations(verr *jsonschema.ValidationError) []Violation {
	var out []Violation
	var walk func(u jsonschema.OutputUnit)
	walk = func(u jsonschema.OutputUnit) {
		if len(u.Errors) == 0 {
			if u.Error != nil {
				out = append(out, Violation{Pointer: u.InstanceLocation, Message: u.Error.String()})
			}
			return
		}
		for _, c := range u.Errors {
			walk(c)
		}
	}
	walk(*verr.DetailedOutput())
	if len(out) == 0 {
		out = []Violation{{Message: verr.Error()}}
	}
	return out
}
