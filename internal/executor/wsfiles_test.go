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
