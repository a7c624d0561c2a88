package executor

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBoxRootsFollowTheBoxsTrustStore: the secrets' bundle keeps the box's own roots where a
// template keeps them: the file its SSL_CERT_FILE names, else the first distribution's path
// that exists (a template FROM Fedora has no Debian bundle); a box with none is no error.
// Only certificates are kept, read from a regular file (else the next is used): the executor
// reads as root what a template's image names, and every user of the box reads the bundle.
func TestBoxRootsFollowTheBoxsTrustStore(t *testing.T) {
	dir := t.TempDir()
	cert := func(b byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, b}}))
	}
	debian, fedora, own, mixed := filepath.Join(dir, "debian.crt"), filepath.Join(dir, "fedora.crt"), filepath.Join(dir, "own.pem"), filepath.Join(dir, "mixed")
	secret := "SANDPIT_TOKEN=s3cr3t\n"
	key := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("k")}))
	for f, body := range map[string]string{fedora: cert(1), own: cert(2), mixed: secret + cert(3) + key} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	none := func(string) string { return "" }
	named := func(f string) func(string) string {
		return func(k string) string { return map[string]string{"SSL_CERT_FILE": f}[k] }
	}
	for _, c := range []struct {
		name    string
		getenv  func(string) string
		bundles []string
		want    string
	}{
		{"the first that exists", none, []string{debian, fedora}, cert(1)},
		{"the box's SSL_CERT_FILE", named(own), []string{fedora}, cert(2)},
		{"none", none, []string{debian}, ""},
		{"only the certificates of a file that holds more", named(mixed), nil, cert(3)},
	} {
		got, err := boxRoots(c.getenv, c.bundles)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	for _, f := range []string{dir, "/dev/zero"} {
		got, err := boxRoots(named(f), []string{fedora})
		if string(got) != cert(1) || err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("SSL_CERT_FILE=%s: %q, %v; want it passed over as not a regular file, for the distribution's", f, got, err)
		}
	}
}
