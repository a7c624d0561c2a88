package mcpserver

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A trial's MCP client was told to POST to a REST route to start a session, and given the
// schema validator's words for a bad argument: the daemon's advice is said as tools, and
// arguments that do not fit a tool in the tool's words.
func TestInToolWords(t *testing.T) {
	rest := regexp.MustCompile(`\b(GET|POST|PUT|PATCH|DELETE) (/v1/|…/)`)
	for _, c := range []struct{ daemon, want string }{
		{`session not found: agent "a" has no session "se_1" (each agent sees only its own sessions: name the agent it was created for); POST /v1/agents/a/sessions creates a new one`,
			"connect as the agent it was created for); create_session starts a new one"},
		{(&sandbox.SessionLimitError{Agent: "a", Limit: 2, PerAgent: true}).Error(), "close one (close_session), let one expire"},
		{(&sandbox.SessionPausedError{ID: "se_1", Agent: "a", State: sandbox.SessionPaused}).Error(),
			"resume it first (resume_session with id se_1), or create sessions with auto_resume so"},
		{"fork it from a paused session; pause it first (POST /v1/agents/a/sessions/se_1/pause)", "pause it first (pause_session with id se_1)"},
		{"a session's dependencies are given when it is created (POST …/sessions); send the call without them", "created (create_session's dependencies)"},
		{`execution ex_1 has no output file "x.png"; GET /v1/executions/ex_1 lists its files under "files"`, `get_execution of ex_1 lists them under "files"`},
		{`agent "a" has 5 jobs, the most one agent may have (jobs_per_agent); delete one first (DELETE /v1/agents/a/jobs/{id}, or sandpit job rm)`, "delete one first (delete_code_job)"},
		{"is missing: give ?path= a path under /home/user (relative paths start there)", "is missing: give path, a path under /home/user"},
		{`the request body is over the limit of 10 bytes; send a smaller body (GET /v1/limits lists the limits; knowledge imports take up to 64 MiB: import in parts)`,
			"send a smaller body (knowledge imports take up to 64 MiB: import in parts)"},
	} {
		got := toolError(&client.APIError{Message: c.daemon}).Error()
		if !strings.Contains(got, c.want) || rest.MatchString(got) {
			t.Errorf("%q\nbecame %q\nwant it to say %q and no REST route", c.daemon, got, c.want)
		}
	}
}
