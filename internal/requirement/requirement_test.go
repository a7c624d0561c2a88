package requirement

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// accepted lists entries Parse must accept, with the Requirement it must return (Name is
// filled in from the entry's name when the case leaves it empty, and Key from Normalize).
var accepted = []struct {
	in   string
	want Requirement
	str  string // want String(); "" means same as in
}{
	// Names (PEP 508 "Names", PEP 503 normalisation).
	{in: "requests", want: Requirement{Key: "requests"}},
	{in: "A", want: Requirement{Key: "a"}, str: "a"},
	{in: "7", want: Requirement{Key: "7"}},
	{in: "zope.interface", want: Requirement{Key: "zope-interface"}, str: "zope-interface"},
	{in: "Foo_Bar", want: Requirement{Key: "foo-bar"}, str: "foo-bar"},
	{in: "FOO--bar", want: Requirement{Key: "foo-bar"}, str: "foo-bar"},
	{in: "foo._-bar", want: Requirement{Key: "foo-bar"}, str: "foo-bar"},
	{in: "a1-b_c.d", want: Requirement{Key: "a1-b-c-d"}, str: "a1-b-c-d"},
	{in: "  pandas  ", want: Requirement{Name: "pandas", Key: "pandas"}, str: "pandas"},

	// Extras (PEP 508 "Extras", PEP 685 normalisation).
	{in: "rich[jupyter]", want: Requirement{Key: "rich", Extras: []string{"jupyter"}}},
	{in: "foo[b,a]", want: Requirement{Key: "foo", Extras: []string{"a", "b"}}, str: "foo[a,b]"},
	{in: "foo[B,a,A,b]", want: Requirement{Key: "foo", Extras: []string{"a", "b"}}, str: "foo[a,b]"},
	{in: "foo[Dev_Tools]", want: Requirement{Key: "foo", Extras: []string{"dev-tools"}}, str: "foo[dev-tools]"},
	{in: "foo [ a , b ]", want: Requirement{Name: "foo", Key: "foo", Extras: []string{"a", "b"}}, str: "foo[a,b]"},
	{in: "foo[]", want: Requirement{Key: "foo"}, str: "foo"},
	{in: "foo[ ]", want: Requirement{Key: "foo"}, str: "foo"},

	// Each PEP 440 operator.
	{in: "foo~=1.4", want: Requirement{Key: "foo", Specifier: "~=1.4"}},
	{in: "foo==1.4", want: Requirement{Key: "foo", Specifier: "==1.4"}},
	{in: "foo!=1.4", want: Requirement{Key: "foo", Specifier: "!=1.4"}},
	{in: "foo<=1.4", want: Requirement{Key: "foo", Specifier: "<=1.4"}},
	{in: "foo>=1.4", want: Requirement{Key: "foo", Specifier: ">=1.4"}},
	{in: "foo<1.4", want: Requirement{Key: "foo", Specifier: "<1.4"}},
	{in: "foo>1.4", want: Requirement{Key: "foo", Specifier: ">1.4"}},
	{in: "foo===1.4-custom", want: Requirement{Key: "foo", Specifier: "===1.4-custom"}},

	// Several clauses, parentheses, wildcards, spaces.
	{in: "foo>=1,<2", want: Requirement{Key: "foo", Specifier: ">=1,<2"}},
	{in: "foo >= 1 , < 2 , != 1.5", want: Requirement{Name: "foo", Key: "foo", Specifier: ">=1,<2,!=1.5"}, str: "foo>=1,<2,!=1.5"},
	{in: "foo (>=1,<2)", want: Requirement{Key: "foo", Specifier: ">=1,<2"}, str: "foo>=1,<2"},
	{in: "foo( >=1 )", want: Requirement{Key: "foo", Specifier: ">=1"}, str: "foo>=1"},
	{in: "foo[x](==1)", want: Requirement{Key: "foo", Extras: []string{"x"}, Specifier: "==1"}, str: "foo[x]==1"},
	{in: "foo==1.4.*", want: Requirement{Key: "foo", Specifier: "==1.4.*"}},
	{in: "foo!=1.*", want: Requirement{Key: "foo", Specifier: "!=1.*"}},
	{in: "foo===1.*", want: Requirement{Key: "foo", Specifier: "===1.*"}},

	// PEP 440 version forms.
	{in: "foo==1.0rc1", want: Requirement{Key: "foo", Specifier: "==1.0rc1"}},
	{in: "foo==1!2.0.post1.dev3", want: Requirement{Key: "foo", Specifier: "==1!2.0.post1.dev3"}},
	{in: "foo==2.0.0+cpu", want: Requirement{Key: "foo", Specifier: "==2.0.0+cpu"}},
	{in: "foo!=2.0+ubuntu-1.2", want: Requirement{Key: "foo", Specifier: "!=2.0+ubuntu-1.2"}},
	{in: "foo>=v1.0", want: Requirement{Key: "foo", Specifier: ">=v1.0"}},
	{in: "foo==1.0-Alpha.1", want: Requirement{Key: "foo", Specifier: "==1.0-Alpha.1"}},
	{in: "foo>=1.0-1", want: Requirement{Key: "foo", Specifier: ">=1.0-1"}},
	{in: "foo~=2.2.post3", want: Requirement{Key: "foo", Specifier: "~=2.2.post3"}},
	{in: "foo<2.0.dev0", want: Requirement{Key: "foo", Specifier: "<2.0.dev0"}},

	// Markers (PEP 508 "Environment Markers").
	{in: `foo; python_version >= "3.8"`, want: Requirement{Key: "foo", Marker: `python_version >= "3.8"`}},
	{in: `foo;python_version>='3.8'`, want: Requirement{Key: "foo", Marker: `python_version >= "3.8"`}, str: `foo; python_version >= "3.8"`},
	{in: `foo>=1 ;  python_version<"3.13"  `, want: Requirement{Name: "foo", Key: "foo", Specifier: ">=1", Marker: `python_version < "3.13"`}, str: `foo>=1; python_version < "3.13"`},
	{in: `foo[x]>=1,<2; python_full_version != "3.12.0"`, want: Requirement{Key: "foo", Extras: []string{"x"}, Specifier: ">=1,<2", Marker: `python_full_version != "3.12.0"`}},
	{in: `foo; os_name == "nt"`, want: Requirement{Key: "foo", Marker: `os_name == "nt"`}},
	{in: `foo; sys_platform == "win32"`, want: Requirement{Key: "foo", Marker: `sys_platform == "win32"`}},
	{in: `foo; platform_release >= "5.10"`, want: Requirement{Key: "foo", Marker: `platform_release >= "5.10"`}},
	{in: `foo; platform_system == "Linux"`, want: Requirement{Key: "foo", Marker: `platform_system == "Linux"`}},
	{in: `foo; platform_version == "1.2"`, want: Requirement{Key: "foo", Marker: `platform_version == "1.2"`}},
	{in: `foo; platform_machine == "x86_64"`, want: Requirement{Key: "foo", Marker: `platform_machine == "x86_64"`}},
	{in: `foo; platform_python_implementation == "CPython"`, want: Requirement{Key: "foo", Marker: `platform_python_implementation == "CPython"`}},
	{in: `foo; implementation_name == "cpython"`, want: Requirement{Key: "foo", Marker: `implementation_name == "cpython"`}},
	{in: `foo; implementation_version ~= "3.11"`, want: Requirement{Key: "foo", Marker: `implementation_version ~= "3.11"`}},
	{in: `foo; extra == "test"`, want: Requirement{Key: "foo", Marker: `extra == "test"`}},
	{in: `foo; python_version == "3.*"`, want: Requirement{Key: "foo", Marker: `python_version == "3.*"`}},
	{in: `foo; python_version === "3.9"`, want: Requirement{Key: "foo", Marker: `python_version === "3.9"`}},
	{in: `foo; python_version > "3"`, want: Requirement{Key: "foo", Marker: `python_version > "3"`}},
	{in: `foo; python_version <= "3.12"`, want: Requirement{Key: "foo", Marker: `python_version <= "3.12"`}},
	{in: `foo; "linux" in sys_platform`, want: Requirement{Key: "foo", Marker: `"linux" in sys_platform`}},
	{in: `foo; 'arm' not in platform_machine`, want: Requirement{Key: "foo", Marker: `"arm" not in platform_machine`}, str: `foo; "arm" not in platform_machine`},
	{in: `foo; "arm" not   in platform_machine`, want: Requirement{Key: "foo", Marker: `"arm" not in platform_machine`}, str: `foo; "arm" not in platform_machine`},
	{in: `foo; "3.9" <= python_version`, want: Requirement{Key: "foo", Marker: `"3.9" <= python_version`}},
	{in: `foo; os_name == ""`, want: Requirement{Key: "foo", Marker: `os_name == ""`}},
	{in: `foo; os_name == "a.b-c_d*e+f!g~h"`, want: Requirement{Key: "foo", Marker: `os_name == "a.b-c_d*e+f!g~h"`}},

	// and / or / parentheses: "and" binds tighter, parentheses are kept only where needed.
	{in: `foo; python_version >= "3.8" and sys_platform == "linux"`, want: Requirement{Key: "foo", Marker: `python_version >= "3.8" and sys_platform == "linux"`}},
	{in: `foo; python_version >= "3.8" or sys_platform == "linux"`, want: Requirement{Key: "foo", Marker: `python_version >= "3.8" or sys_platform == "linux"`}},
	{in: `foo;python_version>="3.8"and os_name=="posix"or(extra=="x")`, want: Requirement{Key: "foo", Marker: `python_version >= "3.8" and os_name == "posix" or extra == "x"`}, str: `foo; python_version >= "3.8" and os_name == "posix" or extra == "x"`},
	{in: `foo; (os_name == "nt" or sys_platform == "darwin") and python_version < "3.10"`, want: Requirement{Key: "foo", Marker: `(os_name == "nt" or sys_platform == "darwin") and python_version < "3.10"`}},
	{in: `foo; python_version < "3.10" and (os_name == "nt" or (sys_platform == "darwin"))`, want: Requirement{Key: "foo", Marker: `python_version < "3.10" and (os_name == "nt" or sys_platform == "darwin")`}, str: `foo; python_version < "3.10" and (os_name == "nt" or sys_platform == "darwin")`},
	{in: `foo; (os_name == "nt" and extra == "a") or extra == "b"`, want: Requirement{Key: "foo", Marker: `os_name == "nt" and extra == "a" or extra == "b"`}, str: `foo; os_name == "nt" and extra == "a" or extra == "b"`},
	{in: `foo; (extra == "a" and (extra == "b" and extra == "c"))`, want: Requirement{Key: "foo", Marker: `extra == "a" and extra == "b" and extra == "c"`}, str: `foo; extra == "a" and extra == "b" and extra == "c"`},
	{in: `foo; ((extra == "a" or extra == "b") or extra == "c")`, want: Requirement{Key: "foo", Marker: `extra == "a" or extra == "b" or extra == "c"`}, str: `foo; extra == "a" or extra == "b" or extra == "c"`},
	{in: `foo; ((((((((((((((((extra == "a"))))))))))))))))`, want: Requirement{Key: "foo", Marker: `extra == "a"`}, str: `foo; extra == "a"`},
	{in: `foo; ( extra == "a" or extra == "b" ) and ( extra == "c" or extra == "d" )`, want: Requirement{Key: "foo", Marker: `(extra == "a" or extra == "b") and (extra == "c" or extra == "d")`}, str: `foo; (extra == "a" or extra == "b") and (extra == "c" or extra == "d")`},

	// Everything at once.
	{
		in:   ` Foo_Bar [ y , X ] ( >= 2 , < 3 ) ; python_version>="3.8" and (sys_platform=='linux' or os_name == "nt") `,
		want: Requirement{Name: "Foo_Bar", Key: "foo-bar", Extras: []string{"x", "y"}, Specifier: ">=2,<3", Marker: `python_version >= "3.8" and (sys_platform == "linux" or os_name == "nt")`},
		str:  `foo-bar[x,y]>=2,<3; python_version >= "3.8" and (sys_platform == "linux" or os_name == "nt")`,
	},
}

// refused lists entries Parse must refuse, with a part of the message that shows the reason.
var refused = []struct {
	in, want string
}{
	// Empty.
	{"", "is empty"},
	{"   ", "is empty"},

	// Control characters, non-ASCII, length.
	{"foo\x00", "NUL byte"},
	{"\x00", "NUL byte"},
	{"foo\nbar", "line break"},
	{"foo\n--index-url=http://evil", "line break"},
	{"foo\r", "line break"},
	{"foo\tbar", "tab"},
	{"foo>=1\t", "tab"},
	{"foo\x1b[31m", "control character"},
	{"foo\x7f", "control character"},
	{"foo\x08", "control character"},
	{"pändas", "non-ASCII"},
	{"requests\u200b", "non-ASCII"},
	{"foo; python_version >= “3.8”", "non-ASCII"},
	{"\xff", "non-ASCII"},
	{strings.Repeat("a", MaxLength+1), "more than the limit of 256"},
	{"foo; " + strings.Repeat(`os_name=="x"or `, 15) + `os_name=="x"`, "canonical form"},

	// pip options.
	{"--index-url=http://evil", "pip option"},
	{"--extra-index-url http://evil.example/simple", "pip option"},
	{"-i http://evil", "pip option"},
	{"-e .", "pip option"},
	{"-e git+https://x", "pip option"},
	{"-r req.txt", "pip option"},
	{"-c constraints.txt", "pip option"},
	{"  --pre", "pip option"},
	{"-", "pip option"},
	{"foo --hash=sha256:abc", "pip option"},
	{"foo==1 -i evil", "pip option"},
	{"foo; os_name == 'x' --index-url=evil", "pip option"},

	// URLs and direct references.
	{"git+https://github.com/x/y", "is a URL"},
	{"https://example.com/foo-1.0.tar.gz", "is a URL"},
	{"http:evil", "is a URL"},
	{"file:foo", "is a URL"},
	{"hg+ssh:host", "is a URL"},
	{"ftp://x", "is a URL"},
	{"foo @ https://example.com/foo.whl", "direct reference"},
	{"foo@https://x", "direct reference"},
	{"foo @ file:///tmp/x", "direct reference"},
	{"foo[x] @ git+ssh://git@github.com/x/y ; python_version > '3'", "direct reference"},
	{"git@github.com:x/y.git", "direct reference"},
	{"@", "direct reference"},

	// File paths and archives.
	{".", "file path"},
	{"./foo", "file path"},
	{"../foo", "file path"},
	{".hidden", "file path"},
	{"/tmp/foo", "file path"},
	{"foo/bar", "file path"},
	{`C:\pkgs\foo`, "file path"},
	{`foo\bar`, "file path"},
	{"~/pkg", "file path"},
	{"~pkg", "file path"},
	{"foo; os_name == 'a/b'", "file path"},
	{"foo.whl", "archive"},
	{"Foo-1.0-py3-none-any.WHL", "archive"},
	{"foo.tar.gz", "archive"},
	{"foo.tgz", "archive"},
	{"foo.zip", "archive"},
	{"foo.tar", "archive"},
	{"foo.whl[x]", "archive"},
	{"foo.tar.bz2 ; python_version > '3'", "archive"},
	{"foo==1.0+x.whl", "archive"},
	{"foo===1.zip", "archive"},
	{"foo>=1,==1.0+a.tar.gz", "archive"},

	// Names (PEP 508).
	{"foo-", "not a valid package name"},
	{"_foo", `"_foo" is not a valid package name`},
	{"foo...", "not a valid package name"},
	{"foo bar", "not a valid requirement"},
	{"foo,bar", "not a valid requirement"},
	{"[x]", "expected a package name"},
	{"==1", "expected a package name"},
	{"foo$", "not a valid requirement"},
	{"foo#egg=bar", "not a valid requirement"},
	{"foo;", "expected an environment marker"},

	// Extras.
	{"foo[", "expected an extra name"},
	{"foo[a", `expected "," or "]"`},
	{"foo[a,]", "expected an extra name"},
	{"foo[,a]", "expected an extra name"},
	{"foo[a b]", `expected "," or "]"`},
	{"foo[a-]", "not a valid extra name"},
	{"foo[a]]", "not a valid requirement"},
	{"foo[a][b]", "not a valid requirement"},
	{"foo[a]==1[b]", "not a valid requirement"},

	// Version specifiers (PEP 440).
	{"foo=1", "expected a version operator"},
	{"foo~1", "expected a version operator"},
	{"foo==", "expected a version after"},
	{"foo== ", "expected a version after"},
	{"foo>=1.*", "wildcard"},
	{"foo<1.*", "wildcard"},
	{"foo~=1.*", "wildcard"},
	{"foo~=1", "two or more after ~="},
	{"foo>=1+local", "local version label"},
	{"foo~=1.0+local", "local version label"},
	{"foo==1.*.1", "not a valid PEP 440 version"},
	{"foo==1.0.*+x", "not a valid PEP 440 version"},
	{"foo==1.0rc1.*", "not a valid PEP 440 version"},
	{"foo>=abc", "not a valid PEP 440 version"},
	{"foo>=1.0foo", "not a valid PEP 440 version"},
	{"foo==*", "not a valid PEP 440 version"},
	{"foo>=1..2", "not a valid PEP 440 version"},
	{"foo (>=1", `expected "," or ")"`},
	{"foo ()", "expected a version operator"},
	{"foo>=1,", "expected a version operator"},
	{"foo>=1,,<2", "expected a version operator"},
	{"foo>=1 <2", "not a valid requirement"},
	{"foo (>=1),<2", "not a valid requirement"},
	{"foo>=1)", "not a valid requirement"},
	{"foo((>=1))", "expected a version operator"},

	// Markers (PEP 508).
	{"foo; ", "expected an environment marker"},
	{"foo; python_version", "expected a comparison"},
	{"foo; python_version >=", "expected a marker variable"},
	{"foo; python_version >= 3.8", `"3.8" is not a marker variable`},
	{"foo; python_versoin >= '3.8'", "did you mean python_version"},
	{"foo; Python_Version >= '3.8'", "did you mean python_version"},
	{"foo; os.name == 'nt'", "write os_name instead"},
	{"foo; python_implementation == 'CPython'", "write platform_python_implementation instead"},
	{"foo; extras == 'x'", "not a marker variable"},
	{"foo; dependency_groups == 'x'", "not a marker variable"},
	{"foo; 'a' == 'b'", "compares two strings"},
	{"foo; python_version == python_full_version", "compares two marker variables"},
	{"foo; python_version >= '3.8' and", "expected a marker variable"},
	{"foo; python_version >= '3.8' or", "expected a marker variable"},
	{"foo; and python_version >= '3.8'", `"and" is not a marker variable`},
	{"foo; (python_version >= '3.8'", `expected "and", "or" or ")"`},
	{"foo; python_version >= '3.8')", `expected "and", "or", or the end`},
	{"foo; ()", "expected a marker variable"},
	{"foo; python_version >= '3' xor os_name == 'nt'", `expected "and", "or", or the end`},
	{"foo; python_version >= '3' AND os_name == 'nt'", `expected "and", "or", or the end`},
	{"foo; python_version >= '3'and(os_name == 'nt'", `expected "and", "or" or ")"`},
	{"foo; python_version >= '3' andos_name == 'nt'", `expected "and", "or", or the end`},
	{"foo; sys_platform notin 'linux'", "expected a comparison"},
	{"foo; sys_platform not 'linux'", "expected a comparison"},
	{"foo; sys_platform is 'linux'", "expected a comparison"},
	{"foo; sys_platform = 'linux'", "expected a comparison"},
	{"foo; python_version >= '3.8' ; os_name == 'nt'", `expected "and", "or", or the end`},
	{"foo; os_name == \"a b\"", "may not hold spaces"},
	{"foo; sys_platform in 'linux darwin'", "may not hold spaces"},
	{"foo; os_name == \"a#b\"", "may hold only"},
	{"foo; os_name == \"a;b\"", "may hold only"},
	{"foo; os_name == 'a\"b'", "may hold only"},
	{"foo; os_name == \"a'b\"", "may hold only"},
	{"foo; os_name == \"(\"", "may hold only"},
	{"foo; os_name == \"unterminated", "no closing quote"},
	{"foo; os_name == 'mixed\"", "no closing quote"},
	{"foo; python_version > 'abc'", "not a valid PEP 440 version"},
	{"foo; python_version ~= '3'", "two or more after ~="},
	{"foo; python_version >= '3.*'", "wildcard"},
	{"foo; sys_platform < 'linux'", "not a valid PEP 440 version"},
	{"foo; " + strings.Repeat("(", maxMarkerDepth+1) + "extra == 'a'" + strings.Repeat(")", maxMarkerDepth+1), "more than 16 deep"},
}

func TestParseAccepts(t *testing.T) {
	for _, tt := range accepted {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		want := tt.want
		if want.Name == "" {
			want.Name = strings.Trim(tt.in, " ")
			if i := strings.IndexAny(want.Name, " [(<>=!~;"); i >= 0 {
				want.Name = want.Name[:i]
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q)\n got %#v\nwant %#v", tt.in, got, want)
		}
		wantStr := tt.str
		if wantStr == "" {
			wantStr = tt.in
		}
		if s := got.String(); s != wantStr {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, s, wantStr)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tt := range refused {
		got, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) = %#v, want an error containing %q", tt.in, got, tt.want)
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%q) error %T is not an *Error", tt.in, err)
			continue
		}
		if e.Entry != tt.in {
			t.Errorf("Parse(%q) error Entry = %q", tt.in, e.Entry)
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.want) {
			t.Errorf("Parse(%q) error %q does not contain %q", tt.in, msg, tt.want)
		}
		if !strings.HasPrefix(msg, quote(tt.in)+" ") {
			t.Errorf("Parse(%q) error %q does not start with the quoted entry", tt.in, msg)
		}
		if r := e.Reason; r == "" || r[0] < 'a' || r[0] > 'z' {
			t.Errorf("Parse(%q) reason %q does not start with a lower-case word", tt.in, r)
		}
		if !reflect.DeepEqual(got, Requirement{}) {
			t.Errorf("Parse(%q) returned %#v with its error", tt.in, got)
		}
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct{ in, want string }{
		{"git+https://x", `"git+https://x" is a URL: name a package from the index instead, like "requests>=2"`},
		{"foo>=1 2", `"foo>=1 2" is not a valid requirement: expected "," and another version clause, or ";" and a marker, found "2" (column 8); write it like "name[extra]>=1.0,<2; python_version >= \"3.9\""`},
		{strings.Repeat("x", 300), `"` + strings.Repeat("x", 80) + `"... is 300 bytes long, more than the limit of 256`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %v\nwant prefix %s", tt.in, err, tt.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range accepted {
		r, err := Parse(tt.in)
		if err != nil {
			continue // reported by TestParseAccepts
		}
		checkRoundTrip(t, r)
	}
}

// checkRoundTrip checks that r.String() parses back to r (with Name written as Key) and prints
// the same.
func checkRoundTrip(t *testing.T, r Requirement) {
	t.Helper()
	s := r.String()
	r2, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q) (from %#v): %v", s, r, err)
	}
	want := r
	want.Name = r.Key
	if !reflect.DeepEqual(r2, want) {
		t.Fatalf("Parse(%q)\n got %#v\nwant %#v", s, r2, want)
	}
	if s2 := r2.String(); s2 != s {
		t.Fatalf("Parse(%q).String() = %q", s, s2)
	}
}

func TestNormalize(t *testing.T) {
	tests := map[string]string{
		"requests":       "requests",
		"Foo_Bar":        "foo-bar",
		"foo-bar":        "foo-bar",
		"foo.bar":        "foo-bar",
		"FOO--bar":       "foo-bar",
		"foo._-bar":      "foo-bar",
		"zope.interface": "zope-interface",
		"Django":         "django",
		"a_b_c":          "a-b-c",
		"":               "",
	}
	for in, want := range tests {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList([]string{"pandas==2.2.2", "requests>=2", "rich[jupyter]"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var strs []string
	for _, r := range got {
		strs = append(strs, r.String())
	}
	if want := []string{"pandas==2.2.2", "requests>=2", "rich[jupyter]"}; !reflect.DeepEqual(strs, want) {
		t.Errorf("ParseList = %q, want %q", strs, want)
	}

	if got, err := ParseList(nil, 0); err != nil || len(got) != 0 {
		t.Errorf("ParseList(nil) = %v, %v", got, err)
	}

	many := make([]string, MaxEntries)
	for i := range many {
		many[i] = fmt.Sprintf("pkg%d", i)
	}
	if _, err := ParseList(many, 0); err != nil {
		t.Errorf("ParseList(%d entries, 0): %v", len(many), err)
	}

	tests := []struct {
		entries []string
		max     int
		index   int
		entry   string
		want    string
	}{
		{[]string{"ok", "--index-url=x"}, 0, 1, "--index-url=x",
			`dependencies[1] "--index-url=x" is a pip option, not a requirement: `},
		{[]string{"foo-bar", "x", "Foo_Bar>=1"}, 0, 2, "Foo_Bar>=1",
			`dependencies[2] "Foo_Bar>=1" names the same package as dependencies[0] "foo-bar" (both are "foo-bar" after PEP 503 normalisation): list each package once`},
		{[]string{"rich", "rich[jupyter]"}, 0, 1, "rich[jupyter]",
			`dependencies[1] "rich[jupyter]" names the same package as dependencies[0] "rich"`},
		{[]string{"zope.interface", "zope_interface"}, 0, 1, "zope_interface", "names the same package"},
		{[]string{"a", "b", "c"}, 2, -1, "", "dependencies: 3 entries are more than the limit of 2: "},
		{append(many, "one-more"), 0, -1, "", "dependencies: 51 entries are more than the limit of 50: "},
		{append(many, "one-more"), -1, -1, "", "dependencies: 51 entries are more than the limit of 50: "},
	}
	for _, tt := range tests {
		_, err := ParseList(tt.entries, tt.max)
		var le *ListError
		if !errors.As(err, &le) {
			t.Errorf("ParseList(%q, %d) error = %v, want a *ListError", tt.entries, tt.max, err)
			continue
		}
		if le.Index != tt.index || le.Entry != tt.entry {
			t.Errorf("ParseList(%q, %d) error at %d %q, want %d %q", tt.entries, tt.max, le.Index, le.Entry, tt.index, tt.entry)
		}
		if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.HasPrefix(msg, "dependencies") {
			t.Errorf("ParseList(%q, %d) error %q\ndoes not contain %q", tt.entries, tt.max, err, tt.want)
		}
		var e *Error
		if tt.index >= 0 && (!errors.As(err, &e) || e.Entry != tt.entry) {
			t.Errorf("ParseList(%q, %d) error does not wrap an *Error for %q", tt.entries, tt.max, tt.entry)
		}
	}
}
