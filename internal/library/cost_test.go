package library

import (
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// counter is a schema extension on every schema object that counts the evaluations that reach
// it (the validator runs extensions after a schema's own keywords: those that end early on
// type, const or enum are not counted, so the count is a lower bound of the validator's work).
type counter struct{ n *int64 }

func (c counter) Validate(*jsonschema.ValidatorContext, any) { *c.n++ }

// countEvaluations validates doc against schema with every evaluation counted.
func countEvaluations(t *testing.T, schema string, doc any) (*jsonschema.Schema, int64) {
	t.Helper()
	var n int64
	meta, err := jsonschema.NewCompiler().Compile("https://json-schema.org/draft/2020-12/schema")
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.RegisterVocabulary(&jsonschema.Vocabulary{URL: "sandpit:count", Schema: meta,
		Compile: func(*jsonschema.CompilerContext, map[string]any) (jsonschema.SchemaExt, error) {
			return counter{&n}, nil
		}})
	c.AssertVocabs()
	raw, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("sandpit:///s.json", raw); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("sandpit:///s.json")
	if err != nil {
		t.Fatal(err)
	}
	_ = sch.Validate(doc)
	return sch, n
}

// The cost is an upper bound of the evaluations the validator makes, for each kind of keyword
// that applies subschemas.
func TestCostBoundsTheValidator(t *testing.T) {
	cases := []struct{ name, schema, doc string }{
		{"anyOf in items", `{"items": {"anyOf": [{"type": "string"}, {"anyOf": [{"minimum": 5}, {"type": "null"}]}]}}`, `[1, "a", null, 7]`},
		{"allOf oneOf not", `{"allOf": [{"oneOf": [{"type": "integer"}, {"minimum": 0}]}, {"not": {"const": 3}}]}`, `4`},
		{"if then else", `{"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}, "else": {"required": ["c"]}}`, `{"a": 1, "b": {}}`},
		{"properties and patterns", `{"properties": {"a": {"type": "object", "additionalProperties": {"type": "integer"}}},
			"patternProperties": {"^a": {"minProperties": 1}, "b": true}, "additionalProperties": {"items": {}}, "propertyNames": {"maxLength": 3}}`,
			`{"a": {"x": 1, "y": 2}, "ab": {"z": 1}, "c": [1, 2, 3]}`},
		{"prefixItems contains unevaluated", `{"prefixItems": [{"type": "integer"}, {"type": "string"}], "contains": {"type": "integer"},
			"unevaluatedItems": {"type": "boolean"}}`, `[1, "a", true, 2, false]`},
		{"unevaluatedProperties through allOf", `{"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {"type": "string"}}}], "unevaluatedProperties": {"type": "integer"}}`,
			`{"a": 1, "b": "x", "c": 3, "d": "no"}`},
		{"dependentSchemas", `{"dependentSchemas": {"a": {"properties": {"b": {"minimum": 2}}}, "z": {"required": ["q"]}}}`, `{"a": 1, "b": 1}`},
		{"refs and defs", `{"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}, "v": {"type": "integer"}}}}, "$ref": "#/$defs/n"}`,
			`{"v": 1, "next": {"v": 2, "next": {"v": "x", "next": {}}}}`},
		{"dynamic refs", `{"$id": "https://example.com/tree", "$dynamicAnchor": "node", "type": "object",
			"properties": {"data": true, "children": {"type": "array", "items": {"$dynamicRef": "#node"}}}}`,
			`{"data": 1, "children": [{"data": 2, "children": []}, {"children": [{"data": 3}]}]}`},
		{"uniqueItems enum", `{"uniqueItems": true, "items": {"enum": [1, 2, [3], {"a": 4}]}}`, `[1, 2, [3], {"a": 4}, 5]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			sch, evaluations := countEvaluations(t, c.schema, doc)
			if evaluations == 0 {
				t.Fatal("nothing was counted")
			}
			cost := validationCost(sch, doc, MaxValidationCost)
			t.Logf("%d evaluations, cost %d", evaluations, cost)
			if cost < evaluations {
				t.Fatalf("cost %d is under the %d evaluations the validator made", cost, evaluations)
			}
		})
	}
}
