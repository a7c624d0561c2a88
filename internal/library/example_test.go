package library

import (
	"encoding/json"
	"testing"
)

// Issue 33, item 9: the console's run form offered {} for a schema {} breaks; Example offers
// an input that holds.
func TestExample(t *testing.T) {
	for _, c := range []struct{ schema, want string }{
		{`{"type": "object", "required": ["region", "n"], "properties": {"region": {"type": "string", "enum": ["eu", "us"]}, "n": {"type": "integer", "minimum": 3}}}`,
			`{"n":3,"region":"eu"}`},
		{`{"type": "array", "items": {"type": "number"}, "minItems": 2}`, `[0,0]`},
		{`{"type": "object", "properties": {"a": {"type": "string"}}, "examples": [{"a": "hi"}]}`, `{"a":"hi"}`},
		{`{"type": "string", "minLength": 3}`, `"xxx"`},
		{`{"type": "object", "required": ["id"], "properties": {"id": {"type": "string", "pattern": "^[0-9]+$"}}}`, ``}, // "" breaks the pattern: none
		{`{"type": ["null", "object"]}`, `null`},
		{``, ``},
	} {
		got := Example(json.RawMessage(c.schema))
		if c.want == "" {
			if got != nil {
				t.Errorf("Example(%s) = %s, want none", c.schema, got)
			}
			continue
		}
		var a, b any
		if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(c.want), &b) != nil {
			t.Errorf("Example(%s) = %s, want %s", c.schema, got, c.want)
			continue
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("Example(%s) = %s, want %s", c.schema, ja, jb)
		}
	}
}
