package console_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/console"
)

// TestDocsCSP: docs/console.md quotes the pages' Content-Security-Policy header as it is.
func TestDocsCSP(t *testing.T) {
	raw, err := os.ReadFile("../../docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(raw)), " ")
	if !strings.Contains(doc, "`Content-Security-Policy: "+console.CSP+"`") {
		t.Errorf("docs/console.md does not quote the CSP header %q", console.CSP)
	}
}
