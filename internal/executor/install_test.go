package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
)

// An index pip cannot reach is reported as such (with where this machine is from inside the
// sandbox when index_url names 127.0.0.1), one that answers too slowly as slow (issue 33,
// item 3: a read timeout on the wheel was "could not be reached" with the 127.0.0.1 hint);
// other failures keep pip's words.
func TestPipError(t *testing.T) {
	refused := "WARNING: Retrying ... Failed to establish a new connection: [Errno 111] Connection refused\n" +
		"ERROR: Could not find a version that satisfies the requirement tinypkg\n"
	readTimeout := "Collecting tinypkg\n  Downloading http://10.1.2.3:8080/packages/tinypkg-1.0-py3-none-any.whl (40.2 MB)\n" +
		"ERROR: Exception:\nTraceback (most recent call last):\n" +
		"pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPConnectionPool(host='10.1.2.3', port=8080): Read timed out.\n"
	for _, c := range []struct {
		name, output, index string
		want, not           []string
	}{
		{"refused on loopback", refused, "http://127.0.0.1:9/simple",
			[]string{"http://127.0.0.1:9/simple could not be reached from the sandbox", "host.docker.internal", "172.17.0.1", "ERROR: Could not find a version"}, nil},
		{"refused elsewhere", refused, "http://10.1.2.3:9/simple",
			[]string{"http://10.1.2.3:9/simple could not be reached from the sandbox", "check the network and index_url"}, []string{"127.0.0.1", "host.docker.internal"}},
		{"a slow wheel", readTimeout, "http://10.1.2.3:8080/simple",
			[]string{"http://10.1.2.3:8080/simple answered too slowly", "Read timed out", "index_url"}, []string{"could not be reached", "127.0.0.1"}},
		{"a slow PyPI", "WARNING: Retrying (Retry(total=0)) after connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. (read timeout=5)\")': /simple/x/\nERROR: No matching distribution found for x\n", "",
			[]string{"https://pypi.org/simple (pip's default) answered too slowly"}, []string{"could not be reached"}},
	} {
		err := pipError(c.output, protocol.PipOptions{IndexURL: c.index}).Error()
		for _, w := range c.want {
			if !strings.Contains(err, w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(err, w) {
				t.Errorf("%s: %q says %q", c.name, err, w)
			}
		}
	}
	err := pipError("ERROR: No matching distribution found for no-such-pkg\n", protocol.PipOptions{})
	if got := err.Error(); got != "pip could not install it:\nERROR: No matching distribution found for no-such-pkg" {
		t.Errorf("missing package: %q", got)
	}
}

// An install stopped at its timeout names the package index, whether or not pip said anything
// by then (it said "check the index: )" when pip had printed nothing).
func TestPipTimedOut(t *testing.T) {
	for _, c := range []struct{ output, index, want string }{
		{"", "", "pip did not finish within the install timeout of 2m0s and was stopped: raise install_timeout_ms, or check " +
			"the package index https://pypi.org/simple (pip's default)"},
		{"Collecting tinypkg\n  Downloading http://10.1.2.3:8080/packages/tinypkg-1.0.whl (40.2 MB)\n", "http://10.1.2.3:8080/simple",
			"pip did not finish within the install timeout of 2m0s and was stopped: raise install_timeout_ms, or check " +
				"the package index http://10.1.2.3:8080/simple; pip's last words:\nCollecting tinypkg\n  Downloading " +
				"http://10.1.2.3:8080/packages/tinypkg-1.0.whl (40.2 MB)"},
	} {
		if got := pipTimedOut(2*time.Minute, c.output, protocol.PipOptions{IndexURL: c.index}).Error(); got != c.want {
			t.Errorf("pip printed %q:\n got %q\nwant %q", c.output, got, c.want)
		}
	}
}
