package executor

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// TestResolvePath: a session path is absolute under /home/user or relative to it; every other
// path, however it is spelt, is refused by name before any file is touched.
func TestResolvePath(t *testing.T) {
	for _, c := range []struct {
		in    string
		parts []string
		view  string
		bad   bool
	}{
		{in: "a.txt", parts: []string{"a.txt"}, view: "/home/user/a.txt"},
		{in: "/home/user/d/e.csv", parts: []string{"d", "e.csv"}, view: "/home/user/d/e.csv"},
		{in: "/home/user", view: "/home/user"},
		{in: ".", view: "/home/user"},
		{in: "d/../e", parts: []string{"e"}, view: "/home/user/e"},
		{in: "d//e/./f", parts: []string{"d", "e", "f"}, view: "/home/user/d/e/f"},
		{in: "..", bad: true},
		{in: "../user2/x", bad: true},
		{in: "/etc/passwd", bad: true},
		{in: "/proc/self/root/etc/passwd", bad: true},
		{in: "/home/userx", bad: true},
		{in: "/home/user/../../x", bad: true},
		{in: "", bad: true},
		{in: "a\x00b", bad: true},
	} {
		p, err := resolvePath("path", c.in)
		if c.bad {
			var fe *fileError
			if !errors.As(err, &fe) || fe.class != errclass.Invalid {
				t.Errorf("%q: %+v, %v; want an invalid path", c.in, p, err)
			}
			continue
		}
		if err != nil || p.view != c.view || !slices.Equal(p.parts, c.parts) {
			t.Errorf("%q: %+v, %v; want %v %q", c.in, p, err, c.parts, c.view)
		}
	}
}

// TestCommandDir: a command's cwd lies under the session's home unless the caller allows any
// directory (E2B's commands and terminals, "/" too); the home's paths map to the box's home.
func TestCommandDir(t *testing.T) {
	for _, c := range []struct {
		cwd     string
		any     bool
		dir     string
		refused bool
	}{
		{"data", false, "/box/home/data", false},
		{"/home/user/data/..", false, "/box/home", false},
		{"/", false, "", true},
		{"../../etc", false, "", true},
		{"/", true, "/", false},
		{"../../etc", true, "/etc", false},
		{"/home/user/x", true, "/box/home/x", false},
	} {
		dir, _, err := commandDir("/box/home", c.cwd, c.any)
		if (err != nil) != c.refused || dir != c.dir {
			t.Errorf("commandDir(%q, any %v) = %q, %v; want %q (refused %v)", c.cwd, c.any, dir, err, c.dir, c.refused)
		}
	}
}
