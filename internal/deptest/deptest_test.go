package deptest

import "testing"

// TestClientAndCLIDoNotUseTheStore: a program that talks to a daemon reads the ledger through
// the wire types (package apitype), never through the daemon's storage. The REST client links
// no part of internal/store; the CLI's own code imports none of it (it links the store only
// through the packages that start an engine in its process, for `sandpit run --local`).
func TestClientAndCLIDoNotUseTheStore(t *testing.T) {
	store := Module + "/internal/store"
	Deny(t, Module+"/internal/client", store)
	Deny(t, Module+"/internal/apitype", store)
	DenyImport(t, Module+"/internal/cli", store)
}

// TestLayers: the vocabulary (sandbox) and the runtime's contract suite link nothing above
// them; the engine runs one-shot executions and knows nothing of sessions; sessions know
// nothing of the doors that serve them, nor of a runtime or a store. An arrow that ran back up
// would tie a lower room to a higher one.
func TestLayers(t *testing.T) {
	in := func(pkgs ...string) []string {
		for i, p := range pkgs {
			pkgs[i] = Module + "/internal/" + p
		}
		return pkgs
	}
	doors := in("httpapi", "e2b", "mcpserver", "console", "cli", "client", "app")
	runtimes := in("runtime/docker", "runtime/kubernetes", "control", "store")
	above := append(append(in("engine", "session"), doors...), runtimes...)
	Deny(t, Module+"/internal/sandbox", above...)
	Deny(t, Module+"/internal/sandbox/sandboxtest", above...)
	Deny(t, Module+"/internal/engine", append(append(in("session"), doors...), runtimes...)...)
	Deny(t, Module+"/internal/session", append(doors, runtimes...)...)
	Deny(t, Module+"/internal/session/sessiontest", append(doors, runtimes...)...)
	// The ports' proxy reaches a session through a dialer; it knows no session, door or runtime.
	Deny(t, Module+"/internal/ports", append(append(in("engine", "session"), doors...), runtimes...)...)
}
