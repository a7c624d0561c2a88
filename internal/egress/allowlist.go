package egress

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Config is the daemon's egress configuration.
type Config struct {
	// Allow is network_allow: what runs may reach.
	Allow []string
	// IndexURLs are pip's index URLs (index_url and extra_index_urls; "" stands for PyPI):
	// their hosts, and PyPI's file host with PyPI, are what installs may reach.
	IndexURLs []string
	// PackageHosts are the Debian package sources' host names (template_apt_hosts) and
	// BuildAllow is template_build_allow: with the index's hosts, what a template's build may
	// reach (ForBuild).
	PackageHosts, BuildAllow []string
	Limits                   Limits
	// Reserved are destinations no entry opens (the daemon's own API: see ReserveListen).
	Reserved *Reserved
	// Resolver and Dialer default to the system's.
	Resolver Resolver
	Dialer   Dialer
}

// Allowlist is the daemon's egress policy (a sandbox.EgressPolicy).
type Allowlist struct {
	conf     Policy
	index    Policy
	build    Policy
	limits   Limits
	reserved *Reserved
	resolve  Resolver
	dial     Dialer
}

// New parses cfg. Errors name the bad network_allow entries or index URLs.
func New(cfg Config) (*Allowlist, error) {
	conf, err := ParsePolicy("network_allow in the configuration", cfg.Allow)
	if err != nil {
		return nil, err
	}
	index := Policy{Setting: "the package index (index_url, extra_index_urls; installs only)"}
	for _, u := range cfg.IndexURLs {
		hosts, err := indexHosts(u)
		if err != nil {
			return nil, err
		}
		for _, h := range hosts {
			r, err := ParseRule(h)
			if err != nil {
				return nil, fmt.Errorf("the package index %q: %w", u, err)
			}
			// The operator named the index: it may be on the host's own network.
			r.Trusted = true
			if r.isAddr() {
				r.Prefix = r.Prefix.Masked()
			}
			index.Rules = append(index.Rules, r)
		}
	}
	build, err := ParsePolicy("template_build_allow in the configuration (nor of the package sources: template_apt_hosts, index_url, extra_index_urls)", cfg.BuildAllow)
	if err != nil {
		return nil, fmt.Errorf("template_build_allow: %w", err)
	}
	for _, h := range cfg.PackageHosts {
		r, err := ParseRule(h)
		if err != nil {
			return nil, fmt.Errorf("template_apt_hosts: %w", err)
		}
		// As the index: the operator named it, and it may be a mirror on the host's network;
		// but only apt's ports, 80 and 443, unless the entry names its own.
		r.Trusted = true
		if r.Port != 0 {
			build.Rules = append(build.Rules, r)
			continue
		}
		for _, port := range []int{80, 443} {
			r.Port = port
			build.Rules = append(build.Rules, r)
		}
	}
	build.Rules = append(build.Rules, index.Rules...)
	return &Allowlist{conf: conf, index: index, build: build, limits: cfg.Limits, reserved: cfg.Reserved, resolve: cfg.Resolver, dial: cfg.Dialer}, nil
}

// indexHosts returns the host:port rules of an index URL ("" is PyPI: its index and file
// hosts).
func indexHosts(u string) ([]string, error) {
	if u == "" {
		return []string{"pypi.org:443", "files.pythonhosted.org:443"}, nil
	}
	p, err := url.Parse(u)
	if err != nil || p.Hostname() == "" {
		return nil, fmt.Errorf("the package index %q is not a URL with a host", u)
	}
	port := p.Port()
	if port == "" {
		port = "80"
		if p.Scheme == "https" {
			port = "443"
		}
	}
	hosts := []string{net.JoinHostPort(p.Hostname(), port)}
	if p.Hostname() == "pypi.org" {
		hosts = append(hosts, "files.pythonhosted.org:443")
	}
	return hosts, nil
}

// CheckAllow validates a request's network_allow (sandbox.EgressPolicy).
func (a *Allowlist) CheckAllow(allow []string) error {
	_, err := a.conf.Narrow(allow)
	return err
}

// ForRun returns a run's Gate (sandbox.EgressPolicy).
func (a *Allowlist) ForRun(allow ...[]string) sandbox.EgressRun {
	policies := []Policy{a.conf}
	for _, l := range allow {
		if l != nil {
			n, _ := a.conf.Narrow(l) // checked by CheckAllow
			policies = append(policies, n)
		}
	}
	g := NewGate(policies, a.limits, a.resolve, a.dial)
	g.reserved = a.reserved
	return g
}

// ForInstall returns an install's Gate: the package index's hosts only.
func (a *Allowlist) ForInstall() sandbox.EgressRun {
	g := NewGate([]Policy{a.index}, a.limits, a.resolve, a.dial)
	g.reserved = a.reserved
	return g
}

// buildLimits bound a template build's connections: no cap on their number or bytes (the
// build's time and image size caps bound those), 10 s to connect.
func buildLimits() Limits { return Limits{DialTimeout: 10 * time.Second} }

// ForBuild returns a template build's Gate (the build egress policy): the package sources
// (template_apt_hosts, the package index) and template_build_allow, never the daemon's own
// listeners (Config.Reserved), bounded by buildLimits. record, when not nil, is given each
// connection's record as it is made.
func (a *Allowlist) ForBuild(record func(sandbox.EgressConnection)) *Gate {
	g := NewGate([]Policy{a.build}, buildLimits(), a.resolve, a.dial)
	g.reserved, g.onRecord = a.reserved, record
	return g
}

// ForWorkspace returns the Gate of a session's commands (sandbox.EgressPolicy): what runs may
// reach, and the package index, so that `pip install` in a command works as the session's
// dependencies do (the index's rules keep their trust: it may be on the host's network). A
// session's narrowing (allow not nil) holds for its commands as for its calls: only what it
// names, the index included (H80).
func (a *Allowlist) ForWorkspace(allow []string, record func(sandbox.EgressConnection)) sandbox.EgressRun {
	union := Policy{Setting: a.conf.Setting + ", or " + a.index.Setting, Rules: append(slices.Clone(a.conf.Rules), a.index.Rules...)}
	policies := []Policy{union}
	if allow != nil {
		n, _ := a.conf.Narrow(allow) // checked by CheckAllow
		policies = append(policies, n)
	}
	g := NewGate(policies, a.limits, a.resolve, a.dial)
	g.reserved, g.onRecord = a.reserved, record
	return g
}

// Rules returns the configuration's entries and the index's, for /v1/limits and doctor.
func (a *Allowlist) Rules() (allow, install []string) {
	for _, r := range a.conf.Rules {
		allow = append(allow, r.Text)
	}
	for _, r := range a.index.Rules {
		install = append(install, r.Text)
	}
	return allow, install
}

var _ sandbox.EgressPolicy = (*Allowlist)(nil)
