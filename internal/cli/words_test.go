package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Issue 33, item 14: the daemon's messages reach the command line with their REST advice said
// as sandpit commands (the session cap said "DELETE …/sessions/{id}").
func TestInCommandWords(t *testing.T) {
	for _, c := range []struct{ daemon, want string }{
		{(&sandbox.SessionLimitError{Agent: "a", Limit: 2, PerAgent: true}).Error(), "close one (sandpit session rm ID)"},
		{(&sandbox.SessionLimitError{Agent: "a", Limit: 2, PerAgent: true}).Error(), "hibernate one (sandpit session hibernate ID: it keeps its state"},
		// A trial's `session run` without the --agent it made the session with was told to start a
		// new session, losing its state.
		{`session not found: agent "a" has no session "se_1" (each agent sees only its own sessions: name the agent it was created for); POST /v1/agents/a/sessions creates a new one`,
			"give the --agent it was created with); sandpit session new --agent a starts a new one"},
		{"a session's dependencies are given when it is created (POST …/sessions); send the call without them", "created (sandpit session new --dep)"},
		{`execution ex_1 has no output file "x.png"; GET /v1/executions/ex_1 lists its files under "files"`, "sandpit exec files ex_1 lists them"},
		{`no installed package "x"; GET /v1/packages lists them (packages of the image itself cannot be removed)`, "sandpit packages list lists them"},
		{`agent "a" has 5 jobs, the most one agent may have (jobs_per_agent); delete one first (DELETE /v1/agents/a/jobs/{id}, or sandpit job rm)`, "delete one first (sandpit job rm)"},
		{`result "k" of agent "a" has 3 versions, the most one key may have (results_max_versions); delete the key to store it again (DELETE /v1/agents/a/results/k, or sandpit kb rm --kind results --agent a KEY), or store under another key`,
			"delete the key to store it again (sandpit kb rm --kind results --agent a KEY), or"},
		{`the request body is over the limit of 10 bytes; send a smaller body (GET /v1/limits lists the limits; knowledge imports take up to 64 MiB: import in parts)`,
			"send a smaller body (knowledge imports take up to 64 MiB: import in parts)"},
		{(&sandbox.SessionPausedError{ID: "se_1", Agent: "a", State: sandbox.SessionPaused}).Error(),
			"resume it first (sandpit session resume --agent a se_1), or create sessions with --auto-resume so"},
		{"fork it from a paused session; pause it first (POST /v1/agents/a/sessions/se_1/pause)", "pause it first (sandpit session pause --agent a se_1)"},
		{"resume or close a paused session, or hibernate one (POST …/sessions/{id}/hibernate)", "hibernate one (sandpit session hibernate ID)"},
		{`session se_abc has no process "pr_x"; GET …/sessions/se_abc/processes lists them`, "sandpit session ps se_abc lists them"},
		{"path: is missing: give ?path= a path under /home/user (relative paths start there)", "is missing: give ID:PATH with a path under /home/user"},
		{`agent "bob" has no template "tools" it may use; GET /v1/agents/bob/templates lists them`, `it may use; sandpit template ls lists them`},
	} {
		got := inCommandWords(c.daemon)
		if !strings.Contains(got, c.want) || restRoute.MatchString(got) {
			t.Errorf("%q\nbecame %q\nwant it to say %q and no REST route", c.daemon, got, c.want)
		}
	}
}

// A field that is also a plain word of its message is named as the flag only where it is the
// message's subject: a new user read "agent "bob" has no --template "tools"".
func TestInFlagWordsLeavesTheFieldsNoun(t *testing.T) {
	cmd := &cobra.Command{Use: "new"}
	cmd.Flags().String("template", "", "")
	cmd.Flags().Int("timeout", 0, "")
	for _, c := range []struct {
		err  error
		want string
	}{
		{&sandbox.FieldError{Field: "template", Message: `agent "bob" has no template "tools" it may use; GET /v1/agents/bob/templates lists them`},
			`--template: agent "bob" has no template "tools" it may use; sandpit template ls lists them`},
		{&sandbox.FieldError{Field: "template", Message: `template "tools" is failed, not ready`}, `--template "tools" is failed, not ready`},
		{&sandbox.FieldError{Field: "timeout_ms", Message: "must be at most 600000; timeout_ms is in milliseconds"}, "--timeout: must be at most 600000; --timeout is in milliseconds"},
	} {
		if got := inFlagWords(cmd, c.err); got != c.want {
			t.Errorf("%v\nbecame %q\nwant   %q", c.err, got, c.want)
		}
	}
}
