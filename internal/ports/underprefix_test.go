package ports

import "testing"

// A redirect of the path form stays under its prefix however its path climbs: "..", their
// escaped forms, backslashes (browsers read them as slashes) and relative references are
// resolved on the server's root before the prefix is put before them (red team, 4 December
// 2026: "/../../../../../../../ui/" led the browser to the console).
func TestUnderPrefixNeverClimbsOut(t *testing.T) {
	const prefix = "/v1/agents/a/sessions/se_1/ports/8000"
	for _, c := range []struct{ loc, from, want string }{
		{"/home?x=1", "/login", prefix + "/home?x=1"},
		{"/../../../../../../../ui/", "/", prefix + "/ui/"},
		{"/../../../../../../../v1/agents/bob/sessions", "/", prefix + "/v1/agents/bob/sessions"},
		{"/%2e%2e/%2e%2e/%2e%2e/ui", "/", prefix + "/ui"},
		{`/..\..\..\..\ui`, "/", prefix + "/ui"},
		{"../../../../../ui/", "/a/b/c", prefix + "/ui/"},
		{"next", "/a/b", prefix + "/a/next"},
		{"?page=2", "/list?page=1", prefix + "/list?page=2"},
		{"http:/v1/limits", "/", prefix + "/v1/limits"},
		{"https:../../../../ui", "/a/b", prefix + "/ui"},
		{"http://localhost:8000/../../../../../../ui/", "/", prefix + "/ui/"},
		{"http://127.0.0.1:8000/x#frag", "/", prefix + "/x#frag"},
		{"https://example.com/../x", "/", "https://example.com/../x"},
	} {
		if got := underPrefix(browserLocation(c.loc), prefix, 8000, c.from); got != c.want {
			t.Errorf("Location %q from %q became %q, want %q", c.loc, c.from, got, c.want)
		}
	}
}

// A Location is read as a browser reads it: `/\host` is another host, backslashes climb, and
// tabs, newlines and the spaces around it are not there.
func TestBrowserLocation(t *testing.T) {
	for _, c := range []struct{ loc, want string }{
		{`/..\..\..\..\ui`, "/../../../../ui"},
		{`/\127.0.0.1:8765/ui`, "//127.0.0.1:8765/ui"},
		{" \t/x\n/y ", "/x/y"},
		{`/a?b=\c`, `/a?b=\c`},
	} {
		if got := browserLocation(c.loc); got != c.want {
			t.Errorf("browserLocation(%q) = %q, want %q", c.loc, got, c.want)
		}
	}
}
