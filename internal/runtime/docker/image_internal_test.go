package docker

import (
	"regexp"
	"strings"
	"testing"
)

// The sandbox layer is FROM, RUN and COPY, and USER root only when the base's user is another
// or unknown: each instruction of the classic builder is a container and a commit (about 20 s
// each on fuse-overlayfs), and the layer is built again for every template.
func TestSandboxLayerHasNoInstructionItCanDoWithout(t *testing.T) {
	instruction := regexp.MustCompile(`(?m)^[A-Z]+ `)
	r := Recipe{BaseImage: "sandpit-base:bookworm-2", Packages: []string{"numpy", "it's"}}
	for _, c := range []struct {
		user  string
		known bool
		want  string
	}{
		{"", true, "FROM |RUN |COPY "},
		{"root", true, "FROM |RUN |COPY "},
		{"0:0", true, "FROM |RUN |COPY "},
		{"jovyan", true, "FROM |USER |RUN |COPY "},
		{"1000:100", true, "FROM |USER |RUN |COPY "},
		{"", false, "FROM |USER |RUN |COPY "},
	} {
		df := string(render(r, c.user, c.known))
		if got := strings.Join(instruction.FindAllString(df, -1), "|"); got != c.want {
			t.Errorf("base user %q (known %v): instructions %q, want %q", c.user, c.known, got, c.want)
		}
		if !strings.Contains(df, "FROM sandpit-base:bookworm-2\n") || !strings.Contains(df, `PACKAGES='numpy it'\''s' UID_BASE=10000 `) {
			t.Errorf("the rendered Dockerfile lacks its base or its packages as one shell word:\n%s", df)
		}
	}
}

// TestDNSLeaks: the engines whose internal networks forward DNS to the host (CVE-2024-29018).
func TestDNSLeaks(t *testing.T) {
	for v, leaks := range map[string]bool{"20.10.24+dfsg1": true, "24.0.9": true, "25.0.3": true, "25.0.4": false,
		"23.0.10": true, "23.0.11": false, "26.0.0": false, "28.2.2": false, "dev": false} {
		if got := BuildDNSLeaks(v); got != leaks {
			t.Errorf("BuildDNSLeaks(%q) = %v, want %v", v, got, leaks)
		}
	}
}
