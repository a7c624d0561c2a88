package e2b

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/e2b/proto/filesystem"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestFileSignature: a signed URL is E2B's v1 signature (the vectors are the SDK's algorithm,
// computed apart: sha256 of "path:op:user:token[:expiry]", base64 without padding), checked
// for its operation, token and expiry.
func TestFileSignature(t *testing.T) {
	for _, c := range []struct{ path, op, user, token, expiry, want string }{
		{"a.txt", "read", "", "tok", "", "v1_gDv73H8R9a10OdCSX0/JNMqMYLPpmCQAYJY+U68oQjM"},
		{"/home/user/a b.txt", "write", "user", "tok", "1700000000", "v1_hlI+3cdDzgRfTtbK586duwtISc5AdkHh71izK3Kkaf8"},
	} {
		if got := fileSignature(c.path, c.op, c.user, c.token, c.expiry); got != c.want {
			t.Errorf("fileSignature(%q, %q, %q, %q, %q) = %s, want %s", c.path, c.op, c.user, c.token, c.expiry, got, c.want)
		}
	}
	now := time.Unix(1_700_000_000, 0)
	req := func(method, op, token string, expiry int64) *http.Request {
		q := url.Values{"path": {"a.txt"}}
		e := ""
		if expiry != 0 {
			e = strconv.FormatInt(expiry, 10)
			q.Set("signature_expiration", e)
		}
		q.Set("signature", fileSignature("a.txt", op, "", token, e))
		return httptest.NewRequest(method, "/files?"+q.Encode(), nil)
	}
	for _, c := range []struct {
		name string
		r    *http.Request
		ok   bool
	}{
		{"a read", req("GET", "read", "tok", 0), true},
		{"a write", req("POST", "write", "tok", now.Unix()+60), true},
		{"a read signed for writing", req("GET", "write", "tok", 0), false},
		{"another token's", req("GET", "read", "other", 0), false},
		{"an expired one", req("GET", "read", "tok", now.Unix()-1), false},
	} {
		if why := checkSignature(c.r, "tok", now); (why == "") != c.ok {
			t.Errorf("%s: %q, want ok %v", c.name, why, c.ok)
		}
	}
}

// TestSymlinkIsItsTargetsType: E2B's published filesystem.proto has no type for a link, so an
// SDK cannot read one; a link is answered as a file, with its target's absolute path, until
// followLink finds the target's type.
func TestSymlinkIsItsTargetsType(t *testing.T) {
	if _, ok := filesystem.FileType_name[3]; ok || len(filesystem.FileType_name) != 3 {
		t.Errorf("FileType has %v, want E2B's published values (unspecified, file, directory)", filesystem.FileType_name)
	}
	info := entryInfo(sandbox.FileEntry{Path: "/home/user/d/link", Name: "link", Type: "symlink", Mode: "0777", Target: "../a.txt"})
	if info.GetType() != filesystem.FileType_FILE_TYPE_FILE || info.GetSymlinkTarget() != "/home/user/a.txt" {
		t.Errorf("a link's entry: %v", info)
	}
}
