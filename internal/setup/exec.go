package setup

import (
	"context"
	"os"
	"os/exec"
)

// ExecRunner runs commands for real.
type ExecRunner struct{}

// LookPath finds a command in PATH (or checks a path).
func (ExecRunner) LookPath(name string) (string, error) { return exec.LookPath(name) }

// Run runs a command with env added to this process's environment.
func (ExecRunner) Run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
