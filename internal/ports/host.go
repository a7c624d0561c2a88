package ports

import (
	"strconv"
	"strings"
)

// A port's host name of its own, {port}-{session}.{domain}: a separate origin for browsers,
// so that a page a session serves shares nothing with the daemon's (cookies, storage, the
// console). domain is the daemon's public_host, e.g. localhost:8765 (browsers resolve
// *.localhost to loopback).

// Host is port's host name for session id under domain.
func Host(port int, id, domain string) string {
	return strconv.Itoa(port) + "-" + id + "." + domain
}

// ParseHost reads a Host header as a port's host name under domain (compared without case):
// the port and the session's ID, ok false when host is not one.
func ParseHost(host, domain string) (port int, id string, ok bool) {
	if domain == "" {
		return 0, "", false
	}
	host, domain = strings.ToLower(strings.TrimSuffix(host, ".")), strings.ToLower(domain)
	label, rest, found := strings.Cut(host, ".")
	if h, _, _ := strings.Cut(rest, ":"); !found || (rest != domain && (strings.Contains(domain, ":") || h != domain)) {
		return 0, "", false // a domain without a port matches its name on any port
	}
	p, id, found := strings.Cut(label, "-")
	port, err := strconv.Atoi(p)
	if !found || err != nil || port < 1 || port > 65535 || id == "" || p != strconv.Itoa(port) {
		return 0, "", false
	}
	return port, id, true
}
