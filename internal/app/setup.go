package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/setup"
)

// SetupDocker is setup's Docker for a machine with no daemon running: it builds the image and
// starts the warm container in this process. Close releases the engine it opened.
type SetupDocker struct {
	Cfg config.Config
	Log *slog.Logger
	eng *Core
}

var _ setup.Docker = (*SetupDocker)(nil)

// Ping returns the engine's version; host, when set, becomes the engine used from then on.
func (s *SetupDocker) Ping(ctx context.Context, host string) (string, error) {
	if host != "" {
		s.Cfg.DockerHost = host
	}
	api, err := DockerClient(s.Cfg)
	if err != nil {
		return "", err
	}
	defer api.Close()
	return serverVersion(ctx, api)
}

func serverVersion(ctx context.Context, api client.APIClient) (string, error) {
	v, err := api.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return "", err
	}
	return v.Version, nil
}

// Image builds the sandbox image unless it exists, sending each build line to progress and
// how far the base image's pull and the build have come to fraction.
func (s *SetupDocker) Image(ctx context.Context, progress func(string), fraction func(string, float64)) (string, bool, error) {
	w := lineWriter(progress)
	defer w.Close()
	return BuildImage(ctx, s.Cfg, fractionWriter{w, fraction})
}

// fractionWriter is a build's output writer that passes the build's fractions on
// (docker.Fractions).
type fractionWriter struct {
	io.Writer
	fraction func(stage string, done float64)
}

func (f fractionWriter) Fraction(stage string, done float64) { f.fraction(stage, done) }

// Sandbox opens the engine (adopting a running warm container, or starting one).
func (s *SetupDocker) Sandbox(ctx context.Context) (bool, error) {
	_, _, before, err := Sandbox(ctx, s.Cfg)
	if err != nil {
		return false, err
	}
	running := false
	for _, c := range before {
		running = running || c.State == "running"
	}
	eng, err := Open(ctx, s.Cfg, s.Log, io.Discard)
	if err != nil {
		return false, err
	}
	s.eng = eng
	return !running, nil
}

// Health runs print(1) in the sandbox opened by Sandbox.
func (s *SetupDocker) Health(ctx context.Context) error {
	if s.eng == nil {
		return errors.New("the sandbox is not open")
	}
	return health(ctx, s.eng.Service)
}

// Close releases the engine; the warm container stays for the daemon.
func (s *SetupDocker) Close() error {
	if s.eng == nil {
		return nil
	}
	return s.eng.Close()
}

func health(ctx context.Context, svc *engine.Service) error {
	res, err := svc.Execute(ctx, sandbox.Request{Code: "print(1)", Origin: sandbox.Origin{Source: sandbox.SourceCLI}}, nil)
	if err != nil {
		return err
	}
	if res.Outcome != sandbox.OutcomeOK || res.Stdout != "1\n" {
		return fmt.Errorf("print(1) ended %s (%s), stdout %q, stderr %q", res.Outcome, res.Reason, res.Stdout, res.Stderr)
	}
	return nil
}

// daemonSetup is setup's Engine inside a running daemon: everything is up, so it checks.
type daemonSetup struct{ eng *Core }

func (d daemonSetup) Ping(ctx context.Context, _ string) (string, error) {
	if d.eng.api == nil {
		return "kubernetes runtime (no Docker engine used)", nil
	}
	return serverVersion(ctx, d.eng.api)
}
func (d daemonSetup) Image(context.Context, func(string), func(string, float64)) (string, bool, error) {
	return d.eng.Image, false, nil
}
func (d daemonSetup) Sandbox(context.Context) (bool, error) { return false, nil }
func (d daemonSetup) Health(ctx context.Context) error      { return health(ctx, d.eng.Service) }

// lineWriter calls fn with each line written to it; Close waits for the last line.
func lineWriter(fn func(string)) io.WriteCloser {
	pr, pw := io.Pipe()
	w := &lines{PipeWriter: pw, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				fn(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return w
}

type lines struct {
	*io.PipeWriter
	done chan struct{}
}

func (l *lines) Close() error {
	err := l.PipeWriter.Close()
	<-l.done
	return err
}
