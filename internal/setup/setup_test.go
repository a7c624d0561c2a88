package setup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeRunner knows which commands exist and answers each run from a script.
type fakeRunner struct {
	have map[string]bool
	fail map[string]bool // command lines (name and args) that fail
	ran  []string
}

func (f *fakeRunner) LookPath(name string) (string, error) {
	if f.have[name] {
		return "/usr/bin/" + name, nil
	}
	return "", errors.New("not found")
}

func (f *fakeRunner) Run(_ context.Context, env []string, name string, args ...string) (string, error) {
	line := strings.TrimSpace(strings.Join(env, " ") + " " + name + " " + strings.Join(args, " "))
	f.ran = append(f.ran, line)
	for k := range f.fail {
		if strings.Contains(line, k) {
			return "E: something broke\nfatal: it really broke", errors.New("exit status 1")
		}
	}
	switch {
	case strings.HasSuffix(line, "brew install docker"):
		f.have["docker"] = true
	case strings.HasSuffix(line, "brew install colima"):
		f.have["colima"] = true
	}
	return "ok", nil
}

// fakeDocker answers once it is up.
type fakeDocker struct {
	up, imageBuilt, running bool
	hosts                   []string
}

func (e *fakeDocker) Ping(_ context.Context, host string) (string, error) {
	e.hosts = append(e.hosts, host)
	if !e.up {
		return "", errors.New("cannot connect to the Docker daemon")
	}
	return "24.0.7", nil
}
func (e *fakeDocker) Image(_ context.Context, progress func(string), fraction func(string, float64)) (string, bool, error) {
	if e.imageBuilt {
		return "sandpit-sandbox:abc", false, nil
	}
	fraction("base-image", 0.5)
	progress("Step 1/9 : FROM python:3.11-slim")
	fraction("image", 0)
	e.imageBuilt = true
	return "sandpit-sandbox:abc", true, nil
}
func (e *fakeDocker) Sandbox(context.Context) (bool, error) {
	started := !e.running
	e.running = true
	return started, nil
}
func (e *fakeDocker) Health(context.Context) error { return nil }

func collect(t *testing.T, p Platform, r Runner, d Docker, o Options) ([]Event, string, error) {
	t.Helper()
	var events []Event
	host, err := Run(context.Background(), p, r, d, o, func(ev Event) { events = append(events, ev) })
	return events, host, err
}

func summary(events []Event) string {
	var parts []string
	for _, e := range events {
		if e.Status != Started && e.Status != Progress {
			parts = append(parts, e.Step+":"+e.Status)
		}
	}
	return strings.Join(parts, " ")
}

func TestMacOSFromNothing(t *testing.T) {
	r := &fakeRunner{have: map[string]bool{}, fail: map[string]bool{"colima status": true}}
	e := &fakeDocker{}
	mac := Platform{OS: "darwin", Home: "/Users/ada"}
	// Colima's start brings the engine up.
	r2 := &startingRunner{fakeRunner: r, e: e}
	events, host, err := collect(t, mac, r2, e, Options{Install: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "homebrew:done docker-cli:done colima:done colima-start:done docker:done image:done sandbox:done health:done"
	if got := summary(events); got != want {
		t.Fatalf("steps:\n got %s\nwant %s", got, want)
	}
	if host != "unix:///Users/ada/.colima/default/docker.sock" || e.hosts[len(e.hosts)-1] != host {
		t.Fatalf("the engine is Colima's socket: %q %v", host, e.hosts)
	}
	wantRan := []string{
		"NONINTERACTIVE=1 /bin/bash -c curl -fsSL https://raw.githubusercontent.com/Homebrew/install/HEAD/install.sh | /bin/bash",
		"/opt/homebrew/bin/brew install docker", "/opt/homebrew/bin/brew install colima",
		"colima status", "colima start --cpu 2 --memory 4",
	}
	if fmt.Sprint(r.ran) != fmt.Sprint(wantRan) {
		t.Fatalf("commands:\n got %q\nwant %q", r.ran, wantRan)
	}

	// Run again: everything is there, so everything is skipped.
	r.ran = nil
	events, _, err = collect(t, mac, r, e, Options{Install: true})
	if err != nil || summary(events) != "docker:skipped image:skipped sandbox:skipped health:done" || len(r.ran) != 0 {
		t.Fatalf("second run: %s %v %q", summary(events), err, r.ran)
	}
}

// startingRunner brings the fake engine up when Colima starts.
type startingRunner struct {
	*fakeRunner
	e *fakeDocker
}

func (s *startingRunner) Run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	out, err := s.fakeRunner.Run(ctx, env, name, args...)
	if err == nil && name == "colima" && len(args) > 0 && args[0] == "start" {
		s.e.up = true
	}
	return out, err
}

func TestMacOSFailedStepStops(t *testing.T) {
	r := &fakeRunner{have: map[string]bool{"brew": true}, fail: map[string]bool{"brew install colima": true}}
	e := &fakeDocker{}
	events, _, err := collect(t, Platform{OS: "darwin"}, r, e, Options{Install: true})
	if !errors.Is(err, ErrStepFailed) {
		t.Fatalf("err %v", err)
	}
	if got := summary(events); got != "homebrew:skipped docker-cli:done colima:failed" {
		t.Fatalf("steps: %s", got)
	}
	last := events[len(events)-1]
	if !strings.Contains(last.Message, "brew install colima failed") || !strings.Contains(last.Message, "it really broke") {
		t.Fatalf("the failure names the command and quotes its output: %q", last.Message)
	}
	if e.imageBuilt {
		t.Fatal("setup went on after a failed step")
	}
}

func TestWithoutInstallSaysWhatToDo(t *testing.T) {
	for _, c := range []struct {
		p    Platform
		o    Options
		want string
	}{
		{Platform{OS: "darwin"}, Options{}, "brew install docker colima && colima start --cpu 2 --memory 4"},
		{Platform{OS: "linux", Distro: "debian"}, Options{}, "sudo apt-get install -y docker.io"},
		{Platform{OS: "linux", Distro: "debian"}, Options{Install: true}, "needs root"},
		{Platform{OS: "linux", Distro: "fedora", Root: true}, Options{Install: true}, "Debian and Ubuntu only"},
		{Platform{OS: "darwin"}, Options{Install: true, EngineAddress: "tcp://10.0.0.5:2376"}, "check that address"},
	} {
		r := &fakeRunner{have: map[string]bool{}}
		events, _, err := collect(t, c.p, r, &fakeDocker{}, c.o)
		last := events[len(events)-1]
		if !errors.Is(err, ErrStepFailed) || last.Status != Failed || !strings.Contains(last.Message, c.want) || len(r.ran) != 0 {
			t.Errorf("%+v %+v: %v %q %q", c.p, c.o, err, last.Message, r.ran)
		}
	}
}

func TestLinuxInstallAsRoot(t *testing.T) {
	r := &fakeRunner{have: map[string]bool{}}
	e := &fakeDocker{}
	r2 := &upOnSystemctl{fakeRunner: r, e: e}
	events, _, err := collect(t, Platform{OS: "linux", Distro: "ubuntu", Root: true}, r2, e, Options{Install: true})
	if err != nil || summary(events) != "docker-install:done docker:done image:done sandbox:done health:done" {
		t.Fatalf("%s %v", summary(events), err)
	}
	want := "[DEBIAN_FRONTEND=noninteractive apt-get update DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io systemctl enable --now docker]"
	if fmt.Sprint(r.ran) != want {
		t.Fatalf("commands %q", r.ran)
	}
}

type upOnSystemctl struct {
	*fakeRunner
	e *fakeDocker
}

func (s *upOnSystemctl) Run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	out, err := s.fakeRunner.Run(ctx, env, name, args...)
	if err == nil && name == "systemctl" {
		s.e.up = true
	}
	return out, err
}

func TestOldEngineIsRefused(t *testing.T) {
	e := &oldDocker{}
	events, _, err := collect(t, Platform{OS: "linux"}, &fakeRunner{have: map[string]bool{}}, e, Options{})
	if !errors.Is(err, ErrStepFailed) || !strings.Contains(events[len(events)-1].Message, "too old") {
		t.Fatalf("%v %+v", err, events)
	}
}

type oldDocker struct{ fakeDocker }

func (*oldDocker) Ping(context.Context, string) (string, error) { return "19.03.5", nil }
