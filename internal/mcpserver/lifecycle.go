package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const pauseSessionDoc = `Pause a session you will need later: every process of it stops where it stands and keeps its memory (globals, imports, open files), without using CPU; its lifetime stops counting. resume_session continues it exactly where it was. A session paused for long is hibernated by the daemon (its files kept on disk, its memory dropped): resume_session then brings it back with its files and packages and a new interpreter. Where sandboxes cannot be frozen (the kubernetes runtime) a pause is such a hibernation at once: the answer's state says "hibernated". Fails while a call runs.`

const resumeSessionDoc = `Resume a paused or hibernated session. Answers the session; its "memory" says what was kept: "kept" (from a pause: everything as it was) or "lost" (from a hibernation: files and installed packages are there, but globals and imports are not: run your setup code again).`

const forkSessionDoc = `Fork a paused or hibernated session: a new session (new id) with a copy of its files and installed packages, independent from then on, e.g. to try two approaches from one state. The fork's interpreter is new (memory is not copied). Pause a running session first. Counts as one of your sessions.`

// addLifecycleTools adds pause_session, resume_session and fork_session to s.
func addLifecycleTools(s *mcp.Server, t *tools) {
	for _, tool := range []struct{ name, step, doc string }{
		{"pause_session", "pause", pauseSessionDoc},
		{"resume_session", "resume", resumeSessionDoc},
		{"fork_session", "fork", forkSessionDoc},
	} {
		mcp.AddTool(s, &mcp.Tool{Name: tool.name, Description: tool.doc}, func(ctx context.Context, _ *mcp.CallToolRequest, a SessionIDArgs) (*mcp.CallToolResult, any, error) {
			info, err := t.c.SessionStep(ctx, t.agent, a.ID, tool.step)
			if err != nil {
				return nil, nil, toolError(err)
			}
			return nil, info, nil
		})
	}
}
