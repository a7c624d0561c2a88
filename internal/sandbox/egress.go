package sandbox

// The network policies of a box (the configuration's network): NetworkAllowlist lets runs
// reach only what network_allow names, through the box's egress proxy; NetworkFull is the
// engine's bridge network, unfiltered; NetworkNone is no network at all.
const (
	NetworkAllowlist = "allowlist"
	NetworkFull      = "full"
	NetworkNone      = "none"
)

// EgressPolicy makes the dialers of runs and installs under network "allowlist" (package
// egress implements it). Nil in Hooks means no run or install reaches the network through
// the proxy.
type EgressPolicy interface {
	// CheckAllow validates a request's network_allow: each entry must parse and lie within
	// the configuration's list. The error names the bad entries.
	CheckAllow(allow []string) error
	// ForRun returns a run's dialer: the configuration's network_allow, narrowed by each list
	// of allow that is not nil (a session's, a request's: CheckAllow has accepted each).
	ForRun(allow ...[]string) EgressRun
	// ForInstall returns an install's dialer: the package index's hosts.
	ForInstall() EgressRun
	// ForWorkspace returns the dialer of a session's commands: what runs may reach and the
	// package index's hosts (pip install in a command); with allow not nil (a session's
	// narrowing, CheckAllow has accepted it), only what allow names. record, when not nil, is
	// given each connection's record as it ends (a refused one at once): a session's commands,
	// and what its calls left running, have no run whose result would carry them.
	ForWorkspace(allow []string, record func(EgressConnection)) EgressRun
}

// EgressRun is one run's or install's dialer. Close ends its connections still open (the run
// is over) and refuses new ones; Connections then returns the record of every connection
// asked for, and how many more were left out past the cap on records.
type EgressRun interface {
	EgressDialer
	Close()
	Connections() ([]EgressConnection, int)
}
