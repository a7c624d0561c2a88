package executor

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckOutput(t *testing.T) {
	for text, says := range map[string]string{
		`{"a": 1, "b": [1, {"c": 2}], "d": {"a": 3}}`: "",
		`["a", "a", {"a": "a"}]`:                      "",
		`"x"`:                                         "",
		`{"1": "first", "1": "second"}`:               `the name "1" twice`,
		`[{"k": {"x": 1, "y": [], "x": 2}}]`:          `the name "x" twice`,
		`{"a": {"b": 1}, "c": 2, "a": 3}`:             `the name "a" twice`,
		`{"a\u0062": 1, "ab": 2}`:                     `the name "ab" twice`,
		`{"a": 1} {"b": 2}`:                           "not JSON",
		`{"a": `:                                      "not JSON",
		"\"\xff\"":                                    "not valid UTF-8",
	} {
		err := checkOutput([]byte(text))
		if (says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), says)) {
			t.Errorf("checkOutput(%s) = %v, want %q", text, err, says)
		}
	}
}

func FuzzCheckOutput(f *testing.F) {
	for _, seed := range []string{`{"a": 1, "a": 2}`, `[{"x": [1, {"y": 2}]}]`, `"s"`, `{"a":{"a":{"a":1}}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if checkOutput(text) == nil && (!json.Valid(text) || !utf8.Valid(text)) {
			t.Fatalf("checkOutput accepted %q, which is not JSON in UTF-8", text)
		}
	})
}
