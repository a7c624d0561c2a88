package cli

import (
	"strings"
	"testing"
)

// -f takes a JSON spec, the same spec in YAML (by its name or its first line), or a Dockerfile;
// a new user's YAML spec was built as a Dockerfile before.
func TestParseSpecFile(t *testing.T) {
	yamlSpec := "# tools\nsteps:\n  - apt: [jq]\n  - pip: [requests]\nenv:\n  MODE: fast\n"
	for _, c := range []struct {
		name, content   string
		steps           int
		dockerfile, err string
	}{
		{"tools.json", `{"steps": [{"apt": ["jq"]}, {"pip": ["requests"]}], "env": {"MODE": "fast"}}`, 2, "", ""},
		{"tools.yaml", yamlSpec, 2, "", ""},
		{"-", yamlSpec, 2, "", ""},
		{"spec", "base: sandpit-base:bookworm-2\n", 0, "", ""},
		{"Dockerfile", "# syntax\nFROM debian:bookworm\nRUN apt-get update\n", 0, "FROM debian:bookworm", ""},
		{"tools.yml", "steps: [{apt: [jq]}]\nsteps2: 1\n", 0, "", `unknown field "steps2"`},
		{"tools.yaml", "steps: [unclosed\n", 0, "", "not a YAML template spec"},
		{"tools.json", `{"step": []}`, 0, "", `unknown field "step" (did you mean "steps"?)`},
		{"tools.json", `{"steps": [{"apt": ["jq"]}], "start": {"cmd": "x", "redy": "y"}}`, 0, "", `(did you mean "ready"?)`},
	} {
		spec, err := parseSpecFile(c.name, []byte(c.content))
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "-f "+c.name) {
				t.Errorf("%s %q: %v, want an error naming -f and saying %q", c.name, c.content, err, c.err)
			}
		case err != nil:
			t.Errorf("%s %q: %v", c.name, c.content, err)
		case c.dockerfile != "" && !strings.Contains(spec.Dockerfile, c.dockerfile):
			t.Errorf("%s: Dockerfile %q, want it read as one", c.name, spec.Dockerfile)
		case c.dockerfile == "" && (spec.Dockerfile != "" || len(spec.Steps) != c.steps):
			t.Errorf("%s: %+v, want %d steps and no Dockerfile", c.name, spec, c.steps)
		}
		if c.name == "tools.yaml" && c.err == "" && spec.Env["MODE"] != "fast" {
			t.Errorf("YAML env: %+v", spec.Env)
		}
	}
}
