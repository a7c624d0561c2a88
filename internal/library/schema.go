package library

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

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

// compile compiles a JSON Schema (draft 2020-12 unless it names another in $schema).
func compile(name string, raw []byte) (*jsonschema.Schema, error) {
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
	return sch, nil
}

// validate checks the JSON text v against sch and returns its violations, most specific first,
// or nil when it holds.
func validate(sch *jsonschema.Schema, v []byte) []Violation {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		return []Violation{{Message: "is not valid JSON: " + err.Error()}}
	}
	err = sch.Validate(doc)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Violation{{Message: err.Error()}}
	}
	return violations(verr)
}

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
