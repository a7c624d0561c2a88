package template

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Plan is a spec made ready for the engine: the template layer's Dockerfile and build context,
// and which spec step each of the Dockerfile's instructions belongs to.
type Plan struct {
	// Dockerfile is the template layer's; Context the build context (a tar holding it and the
	// files).
	Dockerfile string
	Context    []byte
	// Steps are the spec's step labels; StepOf[i] is the index in Steps of the Dockerfile's
	// instruction i+1 (the builder's "Step i+1/n"), -1 for sandpit's own instructions.
	Steps  []string
	StepOf []int
	// Hash is the content hash of everything that decides the layer's content, and of the
	// owner whose build it is (the store and the agent).
	Hash string
	// CacheFrom are the images whose steps the engine's builder may reuse: the agent's own
	// template layers and the base (never empty: the builder reads an empty list as every
	// image it has). NoCache reuses none.
	CacheFrom []string
	NoCache   bool
}

// aptOptions makes apt work on mirrors whose Release files are past their Valid-Until (a
// snapshot mirror, as on an offline machine).
const aptOptions = "-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3"

// NewPlan makes owner's plan of spec on base (an image reference the engine has; baseID its
// ID, part of the hash), installing pip steps through pip. The owner (the Service gives
// "STORE-ID/AGENT") is part of the hash: a build is reused by its own agent only, as another
// agent's would tell, by its speed, what that agent built (a file's content guessed, confirmed
// in 0.1 s against 35); and the store's ID, as another store's daemons on the same engine may
// have an agent of the same name.
func NewPlan(owner string, spec Spec, base, baseID string, pip protocol.PipOptions) (Plan, error) {
	var (
		lines  []string
		stepOf []int
		files  []tarFile
		labels []string
	)
	add := func(step int, format string, args ...any) {
		lines = append(lines, fmt.Sprintf(format, args...))
		stepOf = append(stepOf, step)
	}
	// Few instructions of sandpit's own: the classic builder creates a container and commits
	// it for each (about 20 s each on fuse-overlayfs), ENV and ENTRYPOINT too. The env reaches
	// the build's RUN steps through env(1) in each; the sessions of the template get it from the
	// daemon, and every container's entrypoint is the runtime's, whatever the image says.
	var env []string
	if keys := sortedEnv(spec); len(keys) > 0 {
		env = []string{"env"}
		for _, k := range keys {
			env = append(env, k+"="+spec.Env[k])
		}
	}
	run := func(args ...string) string { return execForm(append(slices.Clone(env), args...)) }
	if spec.Dockerfile != "" {
		// The user's Dockerfile counts as one step.
		labels = append(labels, "dockerfile")
		df := strings.TrimRight(spec.Dockerfile, "\n") + "\n"
		n := countInstructions(df)
		lines = append(lines, strings.TrimRight(df, "\n"))
		for range n {
			stepOf = append(stepOf, 0)
		}
	} else {
		add(-1, "FROM %s", base)
		add(-1, "USER root")
	}
	if spec.Workdir != "" {
		add(-1, "WORKDIR %s", spec.Workdir)
	}
	pipArgs := pipFlags(pip)
	for i, st := range spec.Steps {
		labels = append(labels, Label(st))
		switch {
		case len(st.Apt) > 0:
			script := "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get " + aptOptions + " update; " +
				"apt-get " + aptOptions + " install -y --no-install-recommends -- \"$@\"; apt-get clean; rm -rf /var/lib/apt/lists/*"
			add(i, "RUN %s", run(append([]string{"/bin/sh", "-c", script, "apt"}, st.Apt...)...))
		case len(st.Pip) > 0:
			args := append([]string{"env", "PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "python3", "-m", "pip", "install", "--no-cache-dir"}, pipArgs...)
			add(i, "RUN %s", run(append(append(args, "--"), st.Pip...)...))
		case st.File != nil:
			mode, _ := fileMode(st.File.Mode)
			name := fmt.Sprintf("files/%d", i)
			files = append(files, tarFile{name, mode, []byte(st.File.Content)})
			add(i, "COPY %s", execForm([]string{name, st.File.Path}))
		default:
			// A step's own `pip install` (an E2B builder's pip_install) goes to the daemon's
			// index too (the build's proxy lets nothing else out), unless the template's env
			// says otherwise.
			add(i, "RUN %s", execForm(slices.Concat(pipEnv(pip), env, []string{"/bin/sh", "-c", st.Run})))
		}
	}
	df := strings.Join(lines, "\n") + "\n"
	ctx, err := tarContext(append([]tarFile{{"Dockerfile", 0o644, []byte(df)}}, files...))
	if err != nil {
		return Plan{}, err
	}
	h := sha256.New()
	pipJSON, _ := json.Marshal(pip)
	for _, part := range [][]byte{[]byte("sandpit-template-4"), []byte(owner), []byte(base), []byte(baseID), pipJSON, ctx} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return Plan{Dockerfile: df, Context: ctx, Steps: labels, StepOf: stepOf, Hash: hex.EncodeToString(h.Sum(nil)), CacheFrom: []string{base}}, nil
}

// pipFlags are pip's command-line flags for the daemon's index settings.
func pipFlags(p protocol.PipOptions) []string {
	var out []string
	if p.IndexURL != "" {
		out = append(out, "--index-url", p.IndexURL)
	}
	for _, u := range p.ExtraIndexURLs {
		out = append(out, "--extra-index-url", u)
	}
	for _, h := range p.TrustedHosts {
		out = append(out, "--trusted-host", h)
	}
	if p.BinaryOnly {
		out = append(out, "--only-binary", ":all:")
	}
	return out
}

// pipEnv is the daemon's index settings as pip's environment ("env" and its assignments, or
// nothing when pip's defaults hold), for a step's own pip.
func pipEnv(p protocol.PipOptions) []string {
	var out []string
	if p.IndexURL != "" {
		out = append(out, "PIP_INDEX_URL="+p.IndexURL)
	}
	if len(p.ExtraIndexURLs) > 0 {
		out = append(out, "PIP_EXTRA_INDEX_URL="+strings.Join(p.ExtraIndexURLs, " "))
	}
	if len(p.TrustedHosts) > 0 {
		out = append(out, "PIP_TRUSTED_HOST="+strings.Join(p.TrustedHosts, " "))
	}
	if p.BinaryOnly {
		out = append(out, "PIP_ONLY_BINARY=:all:")
	}
	if len(out) == 0 {
		return nil
	}
	return append([]string{"env"}, out...)
}

// execForm is a Dockerfile exec-form argument list: a JSON array, so that no value is ever
// parsed by a shell or by the Dockerfile's own quoting.
func execForm(args []string) string {
	raw, _ := json.Marshal(args)
	return string(raw)
}

// countInstructions counts the instructions of a Dockerfile (the builder's steps); one that
// does not parse counts none (the builder then says why).
func countInstructions(df string) int {
	root, err := parseDockerfile(df)
	if err != nil {
		return 0
	}
	return len(root.Children)
}

// parseDockerfile parses df as the engine's builder does, with BuildKit's parser (its escape
// directive, continuations, comments and ONBUILD's nested instruction). Errors are a
// *sandbox.FieldError of spec.dockerfile.
func parseDockerfile(df string) (*parser.Node, error) {
	res, err := parser.Parse(strings.NewReader(df))
	if err != nil {
		return nil, &sandbox.FieldError{Field: "spec.dockerfile", Message: "does not parse: " + err.Error()}
	}
	return res.AST, nil
}

// DockerfileImages returns the images a Dockerfile builds from (FROM and COPY --from=, not its
// own stages), which the engine must have: it never pulls one. What would make the engine
// fetch anything itself, on the host's network and around the build egress policy, is a
// *sandbox.FieldError of spec.dockerfile naming the line: ADD of a URL or a git repository,
// and an image or ADD source named through a variable (ONBUILD's too: they run in the builds
// of templates based on this one).
func DockerfileImages(df string) ([]string, error) {
	root, err := parseDockerfile(df)
	if err != nil {
		return nil, err
	}
	var images []string
	stages := map[string]bool{}
	var check func(n *parser.Node) error
	check = func(n *parser.Node) error {
		bad := func(format string, args ...any) error {
			return &sandbox.FieldError{Field: "spec.dockerfile", Message: fmt.Sprintf("line %d: ", n.StartLine) + fmt.Sprintf(format, args...)}
		}
		if len(n.Heredocs) > 0 {
			// The engine's classic builder knows no heredocs: the lines this parser reads as a
			// heredoc's body, it runs as instructions (an ADD of a URL among them).
			return bad("a heredoc (<<WORD) is not read by the engine's builder as it is here; write the file with a file step, or in a RUN line")
		}
		var args []string
		for a := n.Next; a != nil; a = a.Next {
			args = append(args, a.Value)
		}
		switch strings.ToLower(n.Value) {
		case "onbuild":
			if n.Next != nil && len(n.Next.Children) > 0 {
				return check(n.Next.Children[0])
			}
		case "from":
			if len(args) == 0 {
				return bad("FROM names no image")
			}
			if strings.Contains(args[0], "$") {
				return bad("FROM %s names its image through a variable; name the image itself (one the engine has: `docker images`)", args[0])
			}
			if !stages[strings.ToLower(args[0])] {
				images = append(images, args[0])
			}
			if len(args) >= 3 && strings.EqualFold(args[1], "AS") {
				stages[strings.ToLower(args[2])] = true
			}
		case "copy":
			for _, f := range n.Flags {
				from, ok := strings.CutPrefix(f, "--from=")
				if !ok {
					continue
				}
				if strings.Contains(from, "$") {
					return bad("COPY --from=%s names its source through a variable; name a stage or an image the engine has", from)
				}
				if _, err := strconv.Atoi(from); err != nil && !stages[strings.ToLower(from)] {
					images = append(images, from)
				}
			}
		case "add":
			// Each part as the builder has it, and all of them run together: no way of
			// writing a URL, split or spaced, gets past.
			all := strings.Join(strings.Fields(strings.Join(append(slices.Clone(n.Flags), args...), "")), "")
			if strings.Contains(all, "://") || strings.Contains(all, "git@") || strings.Contains(all, "$") {
				return bad("ADD of a URL, a git repository or a variable is fetched by the engine itself, around the build egress policy; download it in a RUN step (curl or pip, through the build's proxy) instead")
			}
		}
		return nil
	}
	for _, n := range root.Children {
		if err := check(n); err != nil {
			return nil, err
		}
	}
	return images, nil
}

type tarFile struct {
	name string
	mode int64
	data []byte
}

func tarContext(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
