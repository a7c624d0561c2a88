package app

import (
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/template"
)

// TestTemplatesCheckNamesMissingImages: doctor names the ready templates whose image was
// removed from the engine, and leaves failed ones (which have none) alone.
func TestTemplatesCheckNamesMissingImages(t *testing.T) {
	list := []template.Template{
		{Agent: "alice", Name: "tools", Status: template.StatusReady, Image: "sandpit-sandbox:aaa"},
		{Agent: "bob", Name: "gone", Status: template.StatusReady, Image: "sandpit-sandbox:bbb"},
		{Agent: "bob", Name: "broken", Status: template.StatusFailed},
	}
	have := map[string]bool{"sandpit-sandbox:aaa": true}
	c := templatesCheck(list, func(image string) (bool, error) { return have[image], nil })
	if c.OK || !strings.Contains(c.Detail, "bob/gone (sandpit-sandbox:bbb)") || strings.Contains(c.Detail, "tools") || c.Fix == "" {
		t.Errorf("one image missing: %+v", c)
	}
	have["sandpit-sandbox:bbb"] = true
	if c := templatesCheck(list, func(image string) (bool, error) { return have[image], nil }); !c.OK || c.Detail != "3 templates, 2 ready, each with its image" {
		t.Errorf("all present: %+v", c)
	}
}

// TestBuildNetworkCheck: doctor says when the engine leaks a build's DNS (a new user's
// Docker 20.10 was only "ok docker engine").
func TestBuildNetworkCheck(t *testing.T) {
	if c := buildNetworkCheck("20.10.24+dfsg1"); c.OK || c.Required || !strings.Contains(c.Detail, "CVE-2024-29018") || c.Fix == "" {
		t.Errorf("Docker 20.10: %+v, want advice naming the CVE and a fix", c)
	}
	if c := buildNetworkCheck("28.2.2"); !c.OK {
		t.Errorf("Docker 28: %+v", c)
	}
}
