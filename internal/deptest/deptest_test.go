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
