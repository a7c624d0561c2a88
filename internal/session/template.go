package session

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Templates resolves the templates sessions start from (*template.Service).
type Templates interface {
	// Resolve returns the ready template ref names for agent (see template.Service.Resolve).
	Resolve(ctx context.Context, agent, ref string) (template.Template, error)
}

// ImageOpener starts sessions' sandboxes from a given image (a template's).
type ImageOpener interface {
	OpenSessionImage(ctx context.Context, id, image string) (sandbox.SessionBox, error)
}

// noTemplates says why a daemon without templates has none, and how to give it them.
const noTemplates = "this daemon has no templates: on runtime kubernetes, set kubernetes.template_registry or kubernetes.template_import_command (docs/templates.md)"

// SetTemplates sets the templates sessions may start from (call before serving); without
// it a session naming a template is refused.
func (r *Registry) SetTemplates(t Templates) { r.templates = t }

// resolveTemplate returns agent's template ref, or nil for "". A warm session's is the one
// its pool resolved (see createWarm).
func (r *Registry) resolveTemplate(ctx context.Context, agent, ref string) (*template.Template, error) {
	if w, ok := ctx.Value(warmKey{}).(warmWork); ok && agent == WarmAgent {
		return w.template, nil
	}
	if ref == "" {
		return nil, nil
	}
	if r.templates == nil {
		return nil, &sandbox.FieldError{Field: "template", Message: noTemplates}
	}
	if _, ok := r.opener.(ImageOpener); !ok {
		return nil, &sandbox.FieldError{Field: "template", Message: "this daemon's runtime does not start templates"}
	}
	t, err := r.templates.Resolve(ctx, agent, ref)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// openBox opens session id's sandbox: from t's image, or the runtime's own when t is nil.
func (r *Registry) openBox(ctx context.Context, id string, t *template.Template) (sandbox.SessionBox, error) {
	if t == nil {
		return r.opener.OpenSession(ctx, id)
	}
	return r.opener.(ImageOpener).OpenSessionImage(ctx, id, t.Image)
}

// templateEnv is t's env under env (env wins).
func templateEnv(t *template.Template, env map[string]string) map[string]string {
	if t == nil || len(t.Spec.Env) == 0 {
		return maps.Clone(env)
	}
	out := maps.Clone(t.Spec.Env)
	maps.Copy(out, env)
	return out
}

// readyPoll is how often a template's ready check runs.
const readyPoll = 200 * time.Millisecond

// startTemplate runs the start command of the template h's box was started from (nothing
// when it has none) for session s, whose commands' egress its connections follow (given to h
// now: before, they were refused until the session was live). Errors: those of runStart.
func (r *Registry) startTemplate(ctx context.Context, s *Session, h *held) error {
	if h.template == nil {
		return nil
	}
	s.mu.Lock()
	allow := s.info.NetworkAllow
	s.mu.Unlock()
	if h.egress == nil {
		h.giveEgress(r.workspaceEgress(s, allow))
	}
	env, ca := s.commandEnv(nil)
	ended, err := runStart(ctx, h.box, h.template, env, ca)
	h.startEnded = ended
	return err
}

// runStart runs t's start command in box (in the background, as the session's user,
// in its workdir, with env and, for a session with secrets, their CA as its commands have
// them) and waits until its ready check exits 0; exited is closed when the command ends
// (nil when t has none). Errors name the command and what it said: of class invalid when
// the command ended before it was ready, else unavailable.
func runStart(ctx context.Context, box sandbox.SessionBox, t *template.Template, env map[string]string, ca string) (exited <-chan struct{}, err error) {
	st := t.Spec.Start
	if st == nil {
		return nil, nil
	}
	spec := sandbox.CommandSpec{Argv: []string{"/bin/sh", "-c", st.Cmd}, Env: env, SecretCA: ca, Background: true}
	if t.Spec.Workdir != "" {
		spec.Cwd, spec.AnyCwd = t.Spec.Workdir, true
	}
	ended := make(chan sandbox.ProcessEvent, 1) // its end, with what the box kept of its output
	gone := make(chan struct{})
	var once sync.Once
	if _, err := box.StartCommand(ctx, sandbox.NewProcessID(), spec, func(ev sandbox.ProcessEvent) {
		if ev.End != nil {
			once.Do(func() {
				ended <- ev
				close(gone)
			})
		}
	}); err != nil {
		return nil, fmt.Errorf("starting template %q's start command: %w", t.Name, err)
	}
	if st.Ready == "" {
		return gone, nil
	}
	timeout := time.Duration(st.ReadyTimeoutMS) * time.Millisecond
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	check := spec
	check.Argv, check.Background, check.TimeoutMS = []string{"/bin/sh", "-c", st.Ready}, false, max(timeout.Milliseconds(), 1000)
	var last string
	for {
		var out strings.Builder
		done := make(chan *sandbox.ProcessEnd, 1)
		_, err := box.StartCommand(ctx, sandbox.NewProcessID(), check, func(ev sandbox.ProcessEvent) {
			if out.Len() < 2048 {
				out.WriteString(ev.Data)
			}
			if ev.End != nil {
				done <- ev.End
			}
		})
		if err == nil {
			select {
			case end := <-done:
				if end.ExitCode == 0 && end.Outcome == sandbox.OutcomeOK {
					return gone, nil
				}
				last = fmt.Sprintf("exit code %d: %s", end.ExitCode, strings.TrimSpace(out.String()))
			case <-ctx.Done():
			}
		} else {
			last = err.Error()
		}
		select {
		case ev := <-ended:
			// Not unavailable: starting again fails again; the template needs fixing.
			return nil, errclass.Newf(errclass.Invalid, "template %q's start command %q ended (%s) before its ready check %q passed%s; fix the command and build the template again",
				t.Name, st.Cmd, endSaid(ev.End), st.Ready, wrote(ev.Tail))
		case <-ctx.Done():
			return nil, errclass.Newf(errclass.Unavailable, "template %q's ready check %q did not pass within %d ms (last: %s); if it never will, fix the template's start.ready or raise start.ready_timeout_ms and build it again", t.Name, st.Ready, timeout.Milliseconds(), last)
		case <-time.After(readyPoll):
		}
	}
}

// endSaid says how a command ended: its exit code, or its outcome's reason.
func endSaid(end *sandbox.ProcessEnd) string {
	if end.Outcome == sandbox.OutcomeOK {
		return fmt.Sprintf("exit code %d", end.ExitCode)
	}
	return end.Reason
}

// wrote is "; it wrote: " and the last lines of what a background command's box kept of its
// stderr, else of its stdout ("" when it wrote nothing).
func wrote(tail *sandbox.ProcessTail) string {
	if tail == nil {
		return ""
	}
	out := strings.TrimSpace(tail.Stderr)
	if out == "" {
		out = strings.TrimSpace(tail.Stdout)
	}
	if out == "" {
		return ""
	}
	return "; it wrote: " + lastLines(out, 5)
}

// RunOnce runs req in a session of its own, of req.Template, made for it and closed after it
// whatever its end: a one-shot run of a template. The session takes the request's agent,
// dependencies, network_allow and secrets. Errors are Create's and Execute's.
func (r *Registry) RunOnce(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
	sreq := sandbox.SessionRequest{Agent: req.Agent, Template: req.Template, Dependencies: req.Dependencies,
		NetworkAllow: req.NetworkAllow, Secrets: req.Secrets}
	req.Template, req.Dependencies, req.NetworkAllow, req.Secrets = "", nil, nil, nil
	s, err := r.Create(ctx, sreq)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := s.Close(cctx); err != nil {
			r.log.Warn("closing a one-shot run's session", "session", s.id, "error", err)
		}
	}()
	return s.Execute(ctx, req, true, emit)
}
