package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// sessionLifecycleCommands are `sandpit session pause|resume|hibernate|fork ID`.
func (o *options) sessionLifecycleCommands() []*cobra.Command {
	step := func(name string) func(ctx context.Context, c *client.Client, agent, id string) (apitype.Session, error) {
		return func(ctx context.Context, c *client.Client, agent, id string) (apitype.Session, error) {
			return c.SessionStep(ctx, agent, id, name)
		}
	}
	return []*cobra.Command{
		o.sessionIDCommand("pause", "Pause a session where it stands: no CPU, memory kept; its lifetime stops counting (resume continues it)", step("pause")),
		o.sessionIDCommand("resume", "Resume a paused session (memory kept) or a hibernated one (files and packages kept, a new interpreter)", step("resume")),
		o.sessionIDCommand("hibernate", "Write a session's files to the daemon's disk and remove its sandbox (resume brings them back; memory is lost)", step("hibernate")),
		o.sessionStepCommand("fork", "Make a new session from a paused or hibernated one: a copy of its files and packages (prints the new session's ID)", step("fork"), true),
	}
}

// sessionLine is the one line `sandpit session show` and the lifecycle's commands print.
func sessionLine(info apitype.Session) string {
	line := fmt.Sprintf("%s %s, %d calls", info.ID, info.State, info.Calls)
	if info.Memory != "" && info.State == apitype.SessionActive {
		line += ", memory " + info.Memory
	}
	if info.ForkedFrom != "" {
		line += ", forked from " + info.ForkedFrom
	}
	if info.Hibernation != nil {
		line += fmt.Sprintf(", %d bytes hibernated", info.Hibernation.Bytes)
	}
	if info.LifecycleError != "" {
		line += " (" + info.LifecycleError + ")"
	}
	if info.State == apitype.SessionEnded {
		line += fmt.Sprintf(" (%s: %s)", info.EndReason, sandbox.EscapeName(info.Reason))
	}
	return line
}
