// Package cli is sandpit's command line (cobra). What it serves today, by command:
//
//   - serve: the daemon (app.Serve), REST and MCP on one address.
//   - run: code from a file, -c or stdin, with input files (--file) and output files
//     (--output-dir), through the daemon at SANDPIT_URL, or, when none answers (or with
//     --local), through an engine started in this process for the one command, whose REST
//     handler it calls in process (the daemon's path).
//   - code, job, exec, kb, packages, session: saved code, jobs, the ledger with the runs'
//     output files, the knowledge store, the installed dependencies and stateful sessions,
//     through the daemon's REST API (internal/client), whose answers it reads as the wire
//     types of internal/apitype (never the daemon's store).
//   - mcp: MCP over stdio, through the daemon, or an engine of its own when none answers.
//   - setup, doctor: take a machine to a warm sandbox, and check every requirement with its fix.
//   - image build, sandbox status and rm: the sandbox image and the data directory's containers.
//   - bench: the speed of runs against docker exec and a bare python (internal/bench).
//   - version.
//
// Configuration is read once, for every command, from defaults, the config file, SANDPIT_
// variables and flags (internal/config). Exit codes are decided in one place, ExitCode, from
// an error's class (internal/errclass) or a run's outcome.
package cli
