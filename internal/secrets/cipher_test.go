package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The key file is made once with mode 0600 and reused; one readable by others is refused; the
// environment's key wins over the file.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	none := func(string) (string, bool) { return "", false }
	if _, err := LoadCipher(dir, none, false); err == nil {
		t.Fatal("no key file and create false: no error")
	}
	c1, err := LoadCipher(dir, none, true)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v, %v", fi, err)
	}
	c2, err := LoadCipher(dir, none, true)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c2.Open("", "N", c1.Seal("", "N", []byte("v"))); err != nil || string(v) != "v" {
		t.Fatalf("the key changed between loads: %q, %v", v, err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCipher(dir, none, true); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key readable by others: %v", err)
	}
	env := func(k string) (string, bool) { return "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", k == KeyEnv }
	if _, err := LoadCipher(dir, env, true); err != nil {
		t.Fatalf("the environment's key: %v", err)
	}
	bad := func(k string) (string, bool) { return "short", k == KeyEnv }
	if _, err := LoadCipher(dir, bad, true); err == nil || !strings.Contains(err.Error(), KeyEnv) {
		t.Fatalf("a bad environment key: %v", err)
	}
}

func TestBindingCheck(t *testing.T) {
	for _, tc := range []struct {
		b     Binding
		field string
	}{
		{Binding{}, "hosts"},
		{Binding{Hosts: []string{"https://api.example.com"}}, "hosts"},
		{Binding{Hosts: []string{"api.example.com:443"}}, "hosts"},
		{Binding{Hosts: []string{"a.example"}, Header: "Proxy-Authorization"}, "header"},
		{Binding{Hosts: []string{"a.example"}, Header: "X Key"}, "header"},
		{Binding{Hosts: []string{"a.example"}, Format: "Bearer"}, "format"},
		{Binding{Hosts: []string{"a.example"}, Format: "{{secret}}{{secret}}"}, "format"},
		{Binding{Hosts: []string{"a.example"}, Header: "X-Key", BasicUser: "u"}, "header"},
		{Binding{Hosts: []string{"a.example"}, BasicUser: "u:v"}, "basic_user"},
	} {
		_, err := tc.b.Check()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error of %s", tc.b, err, tc.field)
		}
	}
	b, err := Binding{Hosts: []string{"*.GitHub.com."}, Header: "x-api-key"}.Check()
	if err != nil || b.Header != "X-Api-Key" || b.Format != SecretToken || !b.MatchHost("api.github.com") || b.MatchHost("github.com") || b.MatchHost("evilgithub.com") {
		t.Fatalf("%+v, %v", b, err)
	}
	for _, n := range []string{"PATH", "http_proxy", "SANDPIT_X", "1A", "A-B", ""} {
		if CheckName(n) == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}
