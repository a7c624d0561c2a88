// Package setup takes a machine from nothing to a warm sandbox, step by step, reporting each
// step as it goes: the Docker engine (installed on macOS through Homebrew and Colima, or on
// Debian and Ubuntu through apt, when asked to), the sandbox image, the warm containers and a
// health check. Every step that is already done is reported as skipped, so running it again is
// safe and fast.
//
// Commands run behind the Runner seam, and the Docker engine with sandpit's image and
// containers behind the Docker seam, so the plans for macOS and Linux are tested without those
// machines.
package setup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The statuses of a step (Event.Status).
const (
	Started  = "started"
	Progress = "progress"
	Done     = "done"
	Skipped  = "skipped"
	Failed   = "failed"
)

// Event reports a step. The JSON field names are the public API (the NDJSON stream of
// `sandpit setup --json` and POST /v1/setup).
type Event struct {
	// Step names the step: docker, homebrew, docker-cli, colima, colima-start, docker-install,
	// image, sandbox, health; and base-image for the progress of the base image's pull,
	// which the image step makes when the engine does not have it.
	Step   string `json:"step"`
	Status string `json:"status"`
	// Message says what happened, or for a failure what to do.
	Message string `json:"message"`
	// Progress is the step's completion from 0 to 1, when known.
	Progress float64 `json:"progress,omitempty"`
}

// Runner runs the platform's commands: the seam that tests replace.
type Runner interface {
	// LookPath finds a command, as exec.LookPath.
	LookPath(name string) (string, error)
	// Run runs a command with extra environment entries and returns its combined output.
	Run(ctx context.Context, env []string, name string, args ...string) (string, error)
}

// Docker is the Docker side of setup: the seam over the Docker engine and sandpit's image and
// containers on it.
type Docker interface {
	// Ping returns the engine's version, or why it cannot be reached. dockerHost, when not
	// empty, is the address to use (a socket Colima created).
	Ping(ctx context.Context, dockerHost string) (string, error)
	// Image builds the sandbox image unless it exists (built false), reporting the build's
	// output lines to progress, and to fraction how far a stage has come: "base-image" while
	// the engine pulls the base image, then "image" through the build's steps (done 0 to 1).
	Image(ctx context.Context, progress func(line string), fraction func(stage string, done float64)) (tag string, built bool, err error)
	// Sandbox starts the warm containers unless they run (started false).
	Sandbox(ctx context.Context) (started bool, err error)
	// Health runs print(1) in the sandbox.
	Health(ctx context.Context) error
}

// Platform is the machine setup runs on.
type Platform struct {
	// OS is "darwin" or "linux" (runtime.GOOS).
	OS string
	// Root says whether the process runs as root (Linux installs need it).
	Root bool
	// Distro is /etc/os-release's ID on Linux ("debian", "ubuntu", ...).
	Distro string
	// Home is the user's home directory (Colima's socket lives under it).
	Home string
}

// DetectPlatform describes this machine.
func DetectPlatform(goos string) Platform {
	p := Platform{OS: goos, Root: os.Geteuid() == 0}
	p.Home, _ = os.UserHomeDir()
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ID="); ok {
				p.Distro = strings.Trim(v, `"`)
			}
		}
	}
	return p
}

// Options tune setup.
type Options struct {
	// Install lets setup install what is missing (Homebrew, the Docker CLI and Colima on
	// macOS; docker.io on Debian or Ubuntu as root). Without it, setup says what to install.
	Install bool
	// ColimaCPUs and ColimaMemoryGiB size the Colima VM (defaults 2 and 4).
	ColimaCPUs, ColimaMemoryGiB int
	// EngineAddress is the engine address the user configured (docker_host or DOCKER_HOST),
	// "" for this machine's default: with one, a silent engine is reported, not installed.
	EngineAddress string
}

// ErrStepFailed is wrapped by the error Run returns when a step failed; the step's event says
// what to do.
var ErrStepFailed = errors.New("setup step failed")

// Run performs setup, sending each step's events to emit, and returns the Docker host it found
// the engine at ("" when it is the environment's default). It stops at the first failed step.
func Run(ctx context.Context, p Platform, r Runner, d Docker, o Options, emit func(Event)) (string, error) {
	if o.ColimaCPUs <= 0 {
		o.ColimaCPUs = 2
	}
	if o.ColimaMemoryGiB <= 0 {
		o.ColimaMemoryGiB = 4
	}
	s := &run{p: p, r: r, d: d, o: o, emit: emit}
	host, err := s.docker(ctx)
	if err != nil {
		return "", err
	}
	if err := s.step("image", "building or finding the sandbox image", func() (bool, string, error) {
		tag, built, err := d.Image(ctx, func(line string) { emit(Event{Step: "image", Status: Progress, Message: line}) },
			func(stage string, done float64) {
				what := map[string]string{"base-image": "pulling the base image", "image": "building the sandbox image"}[stage]
				emit(Event{Step: stage, Status: Progress, Message: fmt.Sprintf("%s: %.0f%%", what, done*100), Progress: done})
			})
		if err != nil {
			return false, "", fmt.Errorf("%w; see `sandpit image build` for the build's output", err)
		}
		return built, tag, nil
	}); err != nil {
		return host, err
	}
	if err := s.step("sandbox", "starting the warm containers", func() (bool, string, error) {
		started, err := d.Sandbox(ctx)
		return started, "the warm containers are running (one per slot)", err
	}); err != nil {
		return host, err
	}
	return host, s.step("health", "running print(1) in the sandbox", func() (bool, string, error) {
		return true, "print(1) ran: the sandbox works", d.Health(ctx)
	})
}

type run struct {
	p    Platform
	r    Runner
	d    Docker
	o    Options
	emit func(Event)
}

// step runs do, reporting it; do returns whether it did something (false: skipped) and what
// to say.
func (s *run) step(name, doing string, do func() (bool, string, error)) error {
	s.emit(Event{Step: name, Status: Started, Message: doing})
	did, msg, err := do()
	switch {
	case err != nil:
		s.emit(Event{Step: name, Status: Failed, Message: err.Error()})
		return fmt.Errorf("%w: %s: %v", ErrStepFailed, name, err)
	case did:
		s.emit(Event{Step: name, Status: Done, Message: msg, Progress: 1})
	default:
		s.emit(Event{Step: name, Status: Skipped, Message: msg + " (already done)", Progress: 1})
	}
	return nil
}

// docker makes sure an engine answers, installing one when allowed and needed.
func (s *run) docker(ctx context.Context) (string, error) {
	s.emit(Event{Step: "docker", Status: Started, Message: "looking for the Docker engine"})
	version, err := s.d.Ping(ctx, "")
	if err == nil {
		return "", s.engineOK("docker", version, false)
	}
	why := err
	if s.o.EngineAddress != "" {
		// The engine was named: installing one here would not help.
		return "", s.fail("docker", fmt.Errorf("no Docker engine answers at %s (%v): check that address (docker_host, "+
			"SANDPIT_DOCKER_HOST or DOCKER_HOST), or unset it to use this machine's engine", s.o.EngineAddress, why))
	}
	var host string
	switch s.p.OS {
	case "darwin":
		host, err = s.macOS(ctx, why)
	case "linux":
		err = s.linux(ctx, why)
	default:
		err = s.fail("docker", fmt.Errorf("no Docker engine answers (%v); install Docker for %s and run setup again", why, s.p.OS))
	}
	if err != nil {
		return "", err
	}
	s.emit(Event{Step: "docker", Status: Started, Message: "checking the engine that was set up"})
	version, err = s.d.Ping(ctx, host)
	if err != nil {
		return "", s.fail("docker", fmt.Errorf("the engine was set up but does not answer: %v", err))
	}
	return host, s.engineOK("docker", version, true)
}

// minVersion is the oldest Docker Engine sandpit is tested with.
const minVersion = 20

func (s *run) engineOK(step, version string, installed bool) error {
	major := 0
	fmt.Sscanf(version, "%d", &major)
	if major > 0 && major < minVersion {
		return s.fail(step, fmt.Errorf("Docker Engine %s is too old; sandpit needs %d.10 or newer: upgrade it", version, minVersion))
	}
	status := Skipped
	if installed {
		status = Done
	}
	s.emit(Event{Step: step, Status: status, Message: "Docker Engine " + version + " answers", Progress: 1})
	return nil
}

func (s *run) fail(step string, err error) error {
	s.emit(Event{Step: step, Status: Failed, Message: err.Error()})
	return fmt.Errorf("%w: %s: %v", ErrStepFailed, step, err)
}

// macOS installs Homebrew (if absent), the Docker CLI and Colima, and starts Colima; it
// returns the Docker host of Colima's socket.
func (s *run) macOS(ctx context.Context, why error) (string, error) {
	if !s.o.Install {
		return "", s.fail("docker", fmt.Errorf("no Docker engine answers (%v). Run `sandpit setup --install` to install Homebrew, "+
			"the Docker CLI and Colima, or do it yourself: brew install docker colima && colima start --cpu %d --memory %d",
			why, s.o.ColimaCPUs, s.o.ColimaMemoryGiB))
	}
	s.emit(Event{Step: "docker", Status: Progress, Message: "no engine answers; installing one with Homebrew and Colima"})
	brew := "brew"
	if err := s.step("homebrew", "installing Homebrew", func() (bool, string, error) {
		if p, err := s.r.LookPath("brew"); err == nil {
			brew = p
			return false, "Homebrew is installed", nil
		}
		for _, p := range []string{"/opt/homebrew/bin/brew", "/usr/local/bin/brew"} {
			if _, err := s.r.LookPath(p); err == nil {
				brew = p
				return false, "Homebrew is installed at " + p, nil
			}
		}
		out, err := s.r.Run(ctx, []string{"NONINTERACTIVE=1"}, "/bin/bash", "-c",
			`curl -fsSL https://raw.githubusercontent.com/Homebrew/install/HEAD/install.sh | /bin/bash`)
		if err != nil {
			return false, "", fmt.Errorf("the Homebrew installer failed (%v): %s; install it from https://brew.sh and run setup again", err, tail(out))
		}
		brew = "/opt/homebrew/bin/brew"
		return true, "Homebrew installed", nil
	}); err != nil {
		return "", err
	}
	for _, pkg := range []struct{ step, cmd, formula string }{{"docker-cli", "docker", "docker"}, {"colima", "colima", "colima"}} {
		if err := s.step(pkg.step, "installing "+pkg.formula+" with Homebrew", func() (bool, string, error) {
			if _, err := s.r.LookPath(pkg.cmd); err == nil {
				return false, pkg.formula + " is installed", nil
			}
			if out, err := s.r.Run(ctx, nil, brew, "install", pkg.formula); err != nil {
				return false, "", fmt.Errorf("brew install %s failed (%v): %s", pkg.formula, err, tail(out))
			}
			return true, pkg.formula + " installed", nil
		}); err != nil {
			return "", err
		}
	}
	if err := s.step("colima-start", fmt.Sprintf("starting Colima with %d CPUs and %d GiB", s.o.ColimaCPUs, s.o.ColimaMemoryGiB), func() (bool, string, error) {
		if _, err := s.r.Run(ctx, nil, "colima", "status"); err == nil {
			return false, "Colima is running", nil
		}
		out, err := s.r.Run(ctx, nil, "colima", "start", "--cpu", fmt.Sprint(s.o.ColimaCPUs), "--memory", fmt.Sprint(s.o.ColimaMemoryGiB))
		if err != nil {
			return false, "", fmt.Errorf("colima start failed (%v): %s; try `colima start` yourself and run setup again", err, tail(out))
		}
		return true, "Colima started", nil
	}); err != nil {
		return "", err
	}
	return "unix://" + filepath.Join(s.p.Home, ".colima", "default", "docker.sock"), nil
}

// linux installs docker.io on Debian or Ubuntu as root when allowed, or says what to do.
func (s *run) linux(ctx context.Context, why error) error {
	debian := s.p.Distro == "debian" || s.p.Distro == "ubuntu"
	instructions := "install Docker Engine (https://docs.docker.com/engine/install/) and start it"
	if debian {
		instructions = "sudo apt-get update && sudo apt-get install -y docker.io && sudo systemctl enable --now docker"
	}
	if _, err := s.r.LookPath("dockerd"); err == nil {
		instructions = "Docker is installed but its engine does not answer: start it (sudo systemctl start docker), " +
			"and make sure your user may use it (sudo usermod -aG docker $USER, then log in again)"
		if !s.o.Install || !s.p.Root {
			return s.fail("docker", fmt.Errorf("no Docker engine answers (%v): %s", why, instructions))
		}
		return s.step("docker-start", "starting the Docker engine", func() (bool, string, error) {
			if out, err := s.r.Run(ctx, nil, "systemctl", "start", "docker"); err != nil {
				return false, "", fmt.Errorf("systemctl start docker failed (%v): %s", err, tail(out))
			}
			return true, "the Docker engine started", nil
		})
	}
	if !s.o.Install || !s.p.Root || !debian {
		hint := ""
		if s.o.Install && !s.p.Root {
			hint = " (--install needs root: run it with sudo)"
		} else if s.o.Install {
			hint = " (--install knows Debian and Ubuntu only)"
		}
		return s.fail("docker", fmt.Errorf("no Docker engine answers (%v); %s%s", why, instructions, hint))
	}
	return s.step("docker-install", "installing docker.io with apt", func() (bool, string, error) {
		env := []string{"DEBIAN_FRONTEND=noninteractive"}
		if out, err := s.r.Run(ctx, env, "apt-get", "update"); err != nil {
			return false, "", fmt.Errorf("apt-get update failed (%v): %s", err, tail(out))
		}
		if out, err := s.r.Run(ctx, env, "apt-get", "install", "-y", "docker.io"); err != nil {
			return false, "", fmt.Errorf("apt-get install docker.io failed (%v): %s", err, tail(out))
		}
		if out, err := s.r.Run(ctx, nil, "systemctl", "enable", "--now", "docker"); err != nil {
			return false, "", fmt.Errorf("docker.io is installed but systemctl could not start it (%v): %s; start dockerd yourself", err, tail(out))
		}
		return true, "docker.io installed and started", nil
	})
}

// tail returns the last lines of a command's output, for an error message.
func tail(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " / ")
}
