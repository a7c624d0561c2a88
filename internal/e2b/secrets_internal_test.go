package e2b

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestEnvVarsNameSecrets: an envVar holding a secret's placeholder under the secret's own name
// names that secret (its value is never in the sandbox), the rest stay plain variables, and a
// placeholder under another name is refused, saying the form to send.
func TestEnvVarsNameSecrets(t *testing.T) {
	env, names, err := splitSecrets(map[string]string{"GH": "sandpit-secret:GH", "OPENAI_API_KEY": "sandpit-secret:OPENAI_API_KEY", "MODE": "fast"})
	if err != nil || !maps.Equal(env, map[string]string{"MODE": "fast"}) || !slices.Equal(names, []string{"GH", "OPENAI_API_KEY"}) {
		t.Errorf("splitSecrets = %v, %v, %v", env, names, err)
	}
	if env, names, err := splitSecrets(nil); env != nil || names != nil || err != nil {
		t.Errorf("splitSecrets(nil) = %v, %v, %v", env, names, err)
	}
	_, _, err = splitSecrets(map[string]string{"KEY": "sandpit-secret:GH"})
	if err == nil || !strings.Contains(err.Error(), `envVars.KEY names the secret "GH"`) || !strings.Contains(err.Error(), `{"GH": "sandpit-secret:GH"}`) {
		t.Errorf("a placeholder under another name: %v", err)
	}
}
