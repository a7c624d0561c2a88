package mcpserver_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

func testCipher(t testing.TB) *secrets.Cipher {
	t.Helper()
	c, err := secrets.NewCipher(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestListSecrets: list_secrets names the secrets the agent's code may name (its own, which
// hides a shared one of its name, and the shared ones), never another agent's nor a value.
func TestListSecrets(t *testing.T) {
	url, st := newAPI(t, pyRuntime{}, engine.DefaultConfig())
	k := secrets.NewKeeper(st, testCipher(t))
	for _, s := range []secrets.Secret{{Name: "SHARED"}, {Name: "MINE", Agent: "alice"}, {Name: "BOBS", Agent: "bob"}, {Name: "SHARED", Agent: "alice"}} {
		s.Hosts = []string{"api.example.com"}
		if _, err := k.Set(t.Context(), s, []byte("value-of-"+s.Name+s.Agent)); err != nil {
			t.Fatal(err)
		}
	}
	cs := connect(t, newServer(t, url, "alice"))
	res, text := callTool(t, cs, "list_secrets", nil)
	if res.IsError || !strings.Contains(text, `"MINE"`) || strings.Count(text, `"SHARED"`) != 1 || strings.Contains(text, "BOBS") ||
		strings.Contains(text, "value-of") || !strings.Contains(text, "api.example.com") {
		t.Fatalf("list_secrets: %v %s", res.IsError, text)
	}
}
