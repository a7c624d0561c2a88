// Package template is sandpit's templates: named, versioned sandbox images an agent builds
// from a base image and steps (Debian packages, Python packages, files, shell steps, env
// vars, a working directory) or from a Dockerfile, and then starts sessions and runs from.
// The engine builds the template's own layer (its Dockerfile, as root, with the package
// sources reachable) and then sandpit's sandbox layer on top of it (the executor, bootstrap,
// fork server and users, exactly as for the default image): a template changes what a box
// contains, never how it runs (uid, read-only root, caps, seccomp, egress).
//
// A build is cached by content and agent: the hash of the generated Dockerfile, the files, the
// base image's ID, the pip settings, the agent and the sandbox layer's recipe names the
// images, so the same spec builds once for each agent; the builder reuses the steps of the
// agent's own layers only.
package template

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Limits of a spec, checked by Validate.
const (
	MaxSteps     = 64
	MaxFileBytes = 1 << 20 // each file's content
	MaxSpecBytes = 8 << 20 // files and Dockerfile together
	MaxEnv       = 64
	MaxPreload   = 64
)

// The spec's types are the wire's (package apitype).
type (
	Spec  = apitype.TemplateSpec
	Step  = apitype.TemplateStep
	File  = apitype.TemplateFile
	Start = apitype.TemplateStart
)

// Label is the step's one-line description, as progress and errors name it.
func Label(s Step) string {
	switch {
	case len(s.Apt) > 0:
		return "apt " + strings.Join(s.Apt, " ")
	case len(s.Pip) > 0:
		return "pip " + strings.Join(s.Pip, " ")
	case s.File != nil:
		return "file " + s.File.Path
	default:
		line, _, _ := strings.Cut(s.Run, "\n")
		if len(line) > 80 {
			line = line[:80] + "…"
		}
		return "run " + line
	}
}

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	debPattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(=[A-Za-z0-9.+~:-]+)?$`)
	envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	basePattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$`)
)

// ValidName reports whether name is a template name: 1 to 63 lowercase letters, digits, '_',
// '.' or '-', starting with a letter or digit.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// CheckName is a *sandbox.FieldError of field when name is not a template name.
func CheckName(field, name string) error {
	if !ValidName(name) {
		return &sandbox.FieldError{Field: field, Message: fmt.Sprintf("%q is not a template name: use 1 to 63 lowercase letters, digits, '_', '.' or '-', starting with a letter or digit", name)}
	}
	return nil
}

// CheckTag is a *sandbox.FieldError of field when tag is not a tag a template may have: a name
// as ValidName says, not all digits (NAME:3 is version 3) and not "latest" or "default" (the
// current version, in sandpit's words and E2B's).
func CheckTag(field, tag string) error {
	digits := tag != "" && strings.Trim(tag, "0123456789") == ""
	if !ValidName(tag) || digits || tag == Latest || tag == "default" {
		return &sandbox.FieldError{Field: field, Message: fmt.Sprintf("%q is not a tag: use 1 to 63 lowercase letters, digits, '_', '.' or '-', starting with a letter or digit, not all digits (NAME:3 is version 3) and not %q or \"default\" (the current version)", clip(tag), Latest)}
	}
	return nil
}

// Validate checks s; errors are *sandbox.FieldError naming the field as
// "spec.steps[2].apt" and so on.
func Validate(s Spec) error {
	bad := func(field, format string, args ...any) error {
		return &sandbox.FieldError{Field: "spec." + field, Message: fmt.Sprintf(format, args...)}
	}
	if s.Dockerfile != "" && (s.Base != "" || len(s.Steps) > 0) {
		return bad("dockerfile", "is given with base or steps; give either a dockerfile or a base and steps")
	}
	if s.Dockerfile == "" && s.Base == "" && len(s.Steps) == 0 && s.Start == nil && len(s.Env) == 0 && s.Workdir == "" && len(s.Preload) == 0 {
		return bad("steps", "is empty; a template needs steps, a dockerfile, env, a workdir, a start command or a preload")
	}
	if s.Base != "" {
		name, isTemplate := strings.CutPrefix(s.Base, "template:")
		if isTemplate && !ValidName(name) || !isTemplate && !basePattern.MatchString(s.Base) {
			return bad("base", "%q is not an image reference or template:NAME", s.Base)
		}
	}
	if len(s.Steps) > MaxSteps {
		return bad("steps", "has %d steps; at most %d", len(s.Steps), MaxSteps)
	}
	size := len(s.Dockerfile)
	for i, st := range s.Steps {
		f := fmt.Sprintf("steps[%d]", i)
		set := 0
		for _, b := range []bool{len(st.Apt) > 0, len(st.Pip) > 0, st.File != nil, st.Run != ""} {
			if b {
				set++
			}
		}
		if set != 1 {
			return bad(f, "sets %d of apt, pip, file and run; set exactly one", set)
		}
		for _, p := range st.Apt {
			if !debPattern.MatchString(p) {
				return bad(f+".apt", "%q is not a Debian package name (name or name=version)", p)
			}
		}
		if len(st.Pip) > 0 {
			if _, err := requirement.ParseList(st.Pip, 0); err != nil {
				return bad(f+".pip", "%v", err)
			}
			for _, p := range st.Pip {
				if strings.HasPrefix(strings.TrimSpace(p), "-") {
					return bad(f+".pip", "%q is an option, not a requirement", p)
				}
			}
		}
		if fl := st.File; fl != nil {
			if !path.IsAbs(fl.Path) || path.Clean(fl.Path) != fl.Path || fl.Path == "/" || strings.ContainsAny(fl.Path, "\n\x00") {
				return bad(f+".file.path", "%q is not a clean absolute file path", fl.Path)
			}
			if len(fl.Content) > MaxFileBytes {
				return bad(f+".file.content", "is %d bytes; at most %d", len(fl.Content), MaxFileBytes)
			}
			if _, err := fileMode(fl.Mode); err != nil {
				return bad(f+".file.mode", "%v", err)
			}
			size += len(fl.Content)
		}
		if strings.ContainsRune(st.Run, 0) {
			return bad(f+".run", "contains a NUL byte")
		}
		size += len(st.Run)
	}
	if size > MaxSpecBytes {
		return bad("steps", "holds %d bytes of files, commands and Dockerfile; at most %d", size, MaxSpecBytes)
	}
	if len(s.Env) > MaxEnv {
		return bad("env", "has %d variables; at most %d", len(s.Env), MaxEnv)
	}
	for k, v := range s.Env {
		if !envKeyPattern.MatchString(k) {
			return bad("env", "%q is not a variable name (letters, digits and '_', not starting with a digit)", k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return bad("env."+k, "holds a newline or NUL byte")
		}
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir || strings.ContainsAny(s.Workdir, "\n\r\x00\"")) {
		return bad("workdir", "%q is not a clean absolute path", s.Workdir)
	}
	if len(s.Preload) > MaxPreload {
		return bad("preload", "has %d modules; at most %d", len(s.Preload), MaxPreload)
	}
	for i, m := range s.Preload {
		if !sandbox.IsModuleName(m) {
			return bad(fmt.Sprintf("preload[%d]", i), "%q is not a Python module name; give dotted names such as numpy or scipy.stats", m)
		}
	}
	if st := s.Start; st != nil {
		if strings.TrimSpace(st.Cmd) == "" {
			return bad("start.cmd", "is empty; give the command to start")
		}
		if st.ReadyTimeoutMS < 0 || st.ReadyTimeoutMS > 300_000 {
			return bad("start.ready_timeout_ms", "is %d; allowed range is 0 to 300000 (0: 30000)", st.ReadyTimeoutMS)
		}
	}
	return nil
}

func fileMode(s string) (int64, error) {
	if s == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode such as \"0644\" or \"0755\" (no setuid, setgid or sticky bits)", s)
	}
	return int64(m), nil
}

// BaseTemplate returns the template the spec's base names ("template:NAME"), if any.
func BaseTemplate(s Spec) (string, bool) {
	return strings.CutPrefix(s.Base, "template:")
}

// sortedEnv returns the env's keys in order.
func sortedEnv(s Spec) []string {
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
