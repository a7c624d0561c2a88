package library

import (
	"encoding/json"
	"strings"
)

// Example returns an input that satisfies schema (a JSON Schema), as a starting point for a
// person filling in a run's input: the schema's own examples, default, const or first enum
// value where it gives one, otherwise a value built from its types (an object of its required
// properties, an array of its minItems items, a string of its minLength, a number at its
// minimum, false, null). It returns nil when schema is empty or invalid, or when what it
// builds does not satisfy the schema (a pattern, oneOf, ...): the caller offers an empty
// value instead.
func Example(schema json.RawMessage) json.RawMessage {
	if len(schema) == 0 {
		return nil
	}
	var s any
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	sch, err := compile("input_schema", schema)
	if err != nil {
		return nil
	}
	out, err := json.MarshalIndent(exampleOf(s, 0), "", "  ")
	if err != nil {
		return nil
	}
	if bad, err := validate("input", sch, out); err != nil || len(bad) > 0 {
		return nil
	}
	return out
}

// exampleOf builds a value for the schema s at nesting depth.
func exampleOf(s any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > 8 {
		return nil
	}
	if ex, ok := m["examples"].([]any); ok && len(ex) > 0 {
		return ex[0]
	}
	for _, k := range []string{"default", "const"} {
		if v, ok := m[k]; ok {
			return v
		}
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := m[k].([]any); ok && len(list) > 0 {
			return exampleOf(list[0], depth+1)
		}
	}
	typ, _ := m["type"].(string)
	if list, ok := m["type"].([]any); ok && len(list) > 0 {
		typ, _ = list[0].(string)
	}
	if typ == "" {
		switch {
		case m["properties"] != nil || m["required"] != nil:
			typ = "object"
		case m["items"] != nil:
			typ = "array"
		}
	}
	number := func() float64 {
		if v, ok := m["minimum"].(float64); ok {
			return v
		}
		if v, ok := m["exclusiveMinimum"].(float64); ok {
			return v + 1
		}
		if v, ok := m["maximum"].(float64); ok && v < 0 {
			return v
		}
		return 0
	}
	switch typ {
	case "object":
		props, _ := m["properties"].(map[string]any)
		obj := map[string]any{}
		req, _ := m["required"].([]any)
		for _, r := range req {
			if name, ok := r.(string); ok {
				obj[name] = exampleOf(props[name], depth+1)
			}
		}
		return obj
	case "array":
		n, _ := m["minItems"].(float64)
		arr := make([]any, 0, int(min(n, 16)))
		for range int(min(n, 16)) {
			arr = append(arr, exampleOf(m["items"], depth+1))
		}
		return arr
	case "string":
		n, _ := m["minLength"].(float64)
		return strings.Repeat("x", int(min(n, 64)))
	case "integer":
		return int64(number())
	case "number":
		return number()
	case "boolean":
		return false
	}
	return nil
}
