package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/template"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/bootstrap"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// dockerfile is the sandbox layer's Dockerfile, a text/template of recipeFile.
//
//go:embed Dockerfile
var dockerfile []byte

var dockerfileTemplate = template.Must(template.New("Dockerfile").Parse(string(dockerfile)))

// recipeFile is what the Dockerfile is rendered with: Base the image it starts from, Root
// whether it must switch to root (the base's user is another, or unknown), Packages the
// preinstalled packages as one shell word, and the users' layout.
type recipeFile struct {
	Base, Packages                                            string
	Root                                                      bool
	UIDBase, SlotUsers, SessionUsers, UIDBlocks, InstallerUID int
}

// render renders the Dockerfile of r on a base whose configured user is baseUser (known
// false: the base could not be inspected, as before a pull).
func render(r Recipe, baseUser string, known bool) []byte {
	var b bytes.Buffer
	err := dockerfileTemplate.Execute(&b, recipeFile{
		Base: r.BaseImage, Packages: sandbox.ShellQuote([]string{strings.Join(r.Packages, " ")}),
		Root:    !known || !isRoot(baseUser),
		UIDBase: boxspec.UIDBase, SlotUsers: MaxSlots, SessionUsers: MaxSessions, UIDBlocks: boxspec.UIDBlocks, InstallerUID: boxspec.InstallerUID,
	})
	if err != nil {
		panic(err) // the template is ours and its data complete: tested
	}
	return b.Bytes()
}

// isRoot reports whether an image's configured user (Config.User: "name", "uid" or either
// with ":group") is root; "" is root.
func isRoot(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	return u == "" || u == "root" || u == "0"
}

// MaxSlots is how many slot users the image has.
const MaxSlots = boxspec.MaxSlots

// Recipe is everything that decides the sandbox image's content.
type Recipe struct {
	// BaseImage is the image to build on; it must have python3 (default python:3.11-slim).
	BaseImage string
	// Packages are pip requirement names preinstalled when the base lacks them.
	Packages []string
	// Repository is the image repository; the tag is the recipe's hash.
	Repository string
	// ExecutorPath is the sandpit-executor binary (static, linux) copied into the image.
	ExecutorPath string
}

// Image is a recipe resolved to its tag.
type Image struct {
	Recipe
	// Tag is Repository:hash, where hash covers the Dockerfile, the base image (name and, when
	// present locally, ID), the packages, the executor binary, the bootstrap and the dependency
	// checker.
	Tag string
	// Confine, when set, builds the image with no network and each step's container bounded
	// as a slot's box: a template's sandbox layer, whose steps run the interpreter and shell
	// an agent's own steps left in the layer below, as root.
	Confine  *Box
	executor []byte
}

// Resolve reads the executor binary and computes the image's tag. It does not talk to the
// engine except to read the base image's ID.
func Resolve(ctx context.Context, api client.APIClient, r Recipe) (Image, error) {
	exe, err := os.ReadFile(r.ExecutorPath)
	if err != nil {
		return Image{}, fmt.Errorf("reading the executor binary: %w (build it with `make build`, or set executor_path)", err)
	}
	h := sha256.New()
	for _, part := range [][]byte{dockerfile, bootstrap.Source, bootstrap.Checker, bootstrap.ForkServer, exe, []byte(r.BaseImage), []byte(strings.Join(r.Packages, " "))} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	if base, err := api.ImageInspect(ctx, r.BaseImage); err == nil {
		h.Write([]byte(base.ID))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return Image{Recipe: r, Tag: r.Repository + ":" + sum[:16], executor: exe}, nil
}

// EnsureImage resolves the recipe and builds its image unless the engine has it, writing the
// build's output to progress. built says whether it had to build.
func EnsureImage(ctx context.Context, api client.APIClient, r Recipe, progress io.Writer) (img Image, built bool, err error) {
	img, err = Resolve(ctx, api, r)
	if err != nil {
		return img, false, err
	}
	ok, err := img.Exists(ctx, api)
	if err != nil || ok {
		return img, false, err
	}
	fmt.Fprintf(progress, "sandpit: building the sandbox image %s on %s (once for this recipe)\n", img.Tag, img.BaseImage)
	return img, true, img.Build(ctx, api, progress)
}

// Exists reports whether the image is in the engine already.
func (img Image) Exists(ctx context.Context, api client.APIClient) (bool, error) {
	_, err := api.ImageInspect(ctx, img.Tag)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("inspecting image %s: %w", img.Tag, err)
}

// Fractions receives how far a build has come, when the progress writer given to Build
// implements it: stage "base-image" while the engine pulls the base image (each layer's
// download and extraction, the layers weighing alike), then stage "image" as the build starts
// each of its steps (step n of m is (n-1)/m done). done is from 0 to 1.
type Fractions interface {
	Fraction(stage string, done float64)
}

// buildStep matches the classic builder's "Step 3/15 : RUN ..." line.
var buildStep = regexp.MustCompile(`^Step (\d+)/(\d+) :`)

// pullProgress follows the layers of an image pull.
type pullProgress map[string][2]float64 // layer ID: download and extraction, each 0 to 1

// update applies m, a pull's status message, and returns the pull's fraction done and whether
// m was about a layer.
func (p pullProgress) update(m jsonstream.Message) (float64, bool) {
	if m.ID == "" || m.Stream != "" {
		return 0, false
	}
	l, known := p[m.ID]
	part := func() float64 {
		if m.Progress != nil && m.Progress.Total > 0 {
			return min(float64(m.Progress.Current)/float64(m.Progress.Total), 1)
		}
		return 0
	}
	switch m.Status {
	case "Pulling fs layer", "Waiting":
	case "Downloading":
		l[0] = part()
	case "Verifying Checksum", "Download complete":
		l[0] = 1
	case "Extracting":
		l[0], l[1] = 1, part()
	case "Pull complete", "Already exists":
		l = [2]float64{1, 1}
	default:
		if !known {
			return 0, false // not a layer: "Pulling from library/python", a digest, ...
		}
	}
	p[m.ID] = l
	var sum float64
	for _, l := range p {
		sum += (l[0] + l[1]) / 2
	}
	return sum / float64(len(p)), true
}

// Build builds the image through the engine, writing the build's output lines to progress
// (and how far it has come, when progress is a Fractions). Building an image that exists is
// cheap: the engine's cache reuses every step.
func (img Image) Build(ctx context.Context, api client.APIClient, progress io.Writer) error {
	fractions, _ := progress.(Fractions)
	pull := pullProgress{}
	base, baseErr := api.ImageInspect(ctx, img.BaseImage)
	var user string
	if baseErr == nil && base.Config != nil {
		user = base.Config.User
	}
	buildCtx, err := img.context(render(img.Recipe, user, baseErr == nil))
	if err != nil {
		return err
	}
	// No labels: each is an instruction, a commit (see the Dockerfile).
	opts := client.ImageBuildOptions{
		Tags:        []string{img.Tag},
		Remove:      true,
		ForceRemove: true,
	}
	if b := img.Confine; b != nil {
		opts.NetworkMode, opts.Memory, opts.MemorySwap = "none", b.MemoryBytes, b.MemorySwapBytes
		opts.CPUPeriod, opts.CPUQuota = 100_000, b.NanoCPUs/10_000 // of each 100 ms period, in µs
	}
	resp, err := api.ImageBuild(ctx, buildCtx, opts)
	if err != nil {
		return img.buildError(err, baseErr)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("reading the build's output: %w", err)
		}
		if m.Error != nil {
			return img.buildError(errors.New(m.Error.Message), baseErr)
		}
		if fractions != nil {
			if f, ok := pull.update(m); ok {
				fractions.Fraction("base-image", f)
			} else if s := buildStep.FindStringSubmatch(m.Stream); s != nil {
				n, _ := strconv.Atoi(s[1])
				total, _ := strconv.Atoi(s[2])
				fractions.Fraction("image", float64(n-1)/float64(max(total, 1)))
			}
		}
		switch {
		case m.Stream != "":
			io.WriteString(progress, m.Stream)
		case m.Status != "":
			line := m.Status
			if m.ID != "" {
				line = m.ID + ": " + line
			}
			fmt.Fprintln(progress, line)
		}
	}
	if ok, err := img.Exists(ctx, api); err != nil || !ok {
		return fmt.Errorf("the build of %s ended without an image (%v)", img.Tag, err)
	}
	return nil
}

func (img Image) buildError(err, baseErr error) error {
	if baseErr != nil && cerrdefs.IsNotFound(baseErr) {
		return fmt.Errorf("building the sandbox image: %w\nthe base image %s is not in the engine and could not be pulled; "+
			"on a machine without a container registry build one from Debian packages with "+
			"scripts/offline-base-image.sh and pass --base-image sandpit-base:bookworm-2 (or set SANDPIT_BASE_IMAGE)", err, img.BaseImage)
	}
	return fmt.Errorf("building the sandbox image %s: %w", img.Tag, err)
}

// context is the build context: the rendered Dockerfile, the executor and the bootstrap.
func (img Image) context(dockerfile []byte) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, dockerfile},
		{"bootstrap.py", 0o644, bootstrap.Source},
		{"deps.py", 0o644, bootstrap.Checker},
		{"forkserver.py", 0o644, bootstrap.ForkServer},
		{"sandpit-executor", 0o755, img.executor},
	}
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
	return &buf, nil
}

func ptr[T any](v T) *T { return &v }
