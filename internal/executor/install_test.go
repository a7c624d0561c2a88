package executor

import (
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/protocol"
)

// An index pip cannot reach is reported as such, with where this machine is from inside the
// sandbox (an index_url on 127.0.0.1 is the sandbox itself); other failures keep pip's words.
func TestPipError(t *testing.T) {
	unreachable := "WARNING: Retrying ... Failed to establish a new connection: [Errno 111] Connection refused\n" +
		"ERROR: Could not find a version that satisfies the requirement tinypkg\n"
	err := pipError(unreachable, protocol.PipOptions{IndexURL: "http://127.0.0.1:9/simple"})
	for _, want := range []string{"http://127.0.0.1:9/simple could not be reached from the sandbox", "host.docker.internal",
		"172.17.0.1", "ERROR: Could not find a version"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("unreachable index: %q lacks %q", err, want)
		}
	}
	err = pipError("ERROR: No matching distribution found for no-such-pkg\n", protocol.PipOptions{})
	if got := err.Error(); got != "pip could not install it:\nERROR: No matching distribution found for no-such-pkg" {
		t.Errorf("missing package: %q", got)
	}
}
