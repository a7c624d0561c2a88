package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Socket families a run may create: unix sockets, IPv4 and IPv6 (loopback only unless the
// policy is "full"), and netlink, which glibc's getaddrinfo and getifaddrs use (and the
// executor's sock_diag). Every other family is refused with EAFNOSUPPORT, as a kernel built
// without it would: AF_VSOCK above all, which no network namespace isolates (a run could reach
// the hypervisor and the VM's other vsock services), AF_ALG, AF_PACKET, AF_XDP, AF_KCM and the
// rest of the kernel's rarely used families.
var allowedFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// deniedSyscalls are taken out of the engine's default profile and answer ENOSYS, so programs
// fall back as on a kernel without them: Linux AIO (io_setup takes from the host-wide aio-nr
// pool, fs.aio-max-nr, which one run could exhaust for every process of the host), io_uring (a
// large kernel attack surface outside most seccomp filtering; its operations are not system
// calls the profile could see), and socketcall (the 32-bit multiplexer, whose arguments are
// behind a pointer where seccomp cannot check the socket family).
var deniedSyscalls = []string{
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"socketcall",
}

// SeccompProfile is sandpit's seccomp profile for a box whose network policy is network:
// the engine's default profile (moby's, github.com/moby/profiles/seccomp) with deniedSyscalls
// answering ENOSYS and socket(2) allowed for allowedFamilies only, every other family answering
// EAFNOSUPPORT. Where the policy gives the box no network ("none", "allowlist": its only
// interface is loopback, and the egress proxy is TCP), an IPv4 or IPv6 socket must also be a
// stream socket: UDP, ICMP and raw sockets are refused (EPERM), so unread datagrams cannot pile
// up kernel memory the memory cgroup does not see.
func SeccompProfile(network string) *seccomp.Seccomp {
	p := seccomp.DefaultProfile()
	drop := append(slices.Clone(deniedSyscalls), "socket")
	rules := p.Syscalls[:0]
	for _, r := range p.Syscalls {
		r.Names = slices.DeleteFunc(r.Names, func(n string) bool { return slices.Contains(drop, n) })
		if len(r.Names) > 0 {
			rules = append(rules, r)
		}
	}
	nosys, noFamily := uint(unix.ENOSYS), uint(unix.EAFNOSUPPORT)
	rules = append(rules, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
		Names: slices.Clone(deniedSyscalls), Action: specs.ActErrno, ErrnoRet: &nosys,
	}, Comment: "sandpit: Linux AIO, io_uring and socketcall answer ENOSYS"})
	socket := func(action specs.LinuxSeccompAction, errno *uint, args ...specs.LinuxSeccompArg) *seccomp.Syscall {
		return &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"socket"}, Action: action, ErrnoRet: errno, Args: args}}
	}
	family := func(f uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: 0, Value: f, Op: specs.OpEqualTo}
	}
	// Each rule compares an argument once: runc makes several comparisons of one argument
	// alternatives, not a conjunction (opencontainers/runc#2735).
	stream := specs.LinuxSeccompArg{Index: 1, Value: 0xf, ValueTwo: unix.SOCK_STREAM, Op: specs.OpMaskedEqual}
	for _, f := range allowedFamilies {
		if network != "full" && (f == unix.AF_INET || f == unix.AF_INET6) {
			rules = append(rules, socket(specs.ActAllow, nil, family(f), stream))
			continue
		}
		rules = append(rules, socket(specs.ActAllow, nil, family(f)))
	}
	for f := uint64(0); f <= unix.AF_MAX; f++ {
		if !slices.Contains(allowedFamilies, f) {
			rules = append(rules, socket(specs.ActErrno, &noFamily, family(f)))
		}
	}
	rules = append(rules, socket(specs.ActErrno, &noFamily, specs.LinuxSeccompArg{Index: 0, Value: unix.AF_MAX, Op: specs.OpGreaterThan}))
	p.Syscalls = rules
	return p
}

// seccompOption is the container security option carrying SeccompProfile(network) as the
// engine takes it ("seccomp=" and the profile's JSON).
func seccompOption(network string) string {
	raw, err := json.Marshal(SeccompProfile(network))
	if err != nil {
		panic("docker: marshalling the seccomp profile: " + err.Error()) // fixed data: cannot fail
	}
	return "seccomp=" + string(raw)
}

// SeccompSummary says which profile sandpit applies for network, in one line for doctor: its
// origin (the moby profiles module's version), a digest of its JSON (the same one the warm
// containers' configuration carries) and what it takes away.
func SeccompSummary(network string) string {
	origin := "moby's default profile"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "github.com/moby/profiles/seccomp" {
				origin += " (github.com/moby/profiles/seccomp " + m.Version + ")"
			}
		}
	}
	udp := ""
	if network != "full" {
		udp = "; no UDP, ICMP or raw sockets (network " + network + ")"
	}
	return "sandpit's profile " + SeccompDigest(network) + ", derived from " + origin +
		": socket families AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK only (others EAFNOSUPPORT, AF_VSOCK among them)" +
		udp + "; " + strings.Join(deniedSyscalls, ", ") + " answer ENOSYS"
}

// SeccompDigest is a short digest of the profile's JSON for network.
func SeccompDigest(network string) string {
	sum := sha256.Sum256([]byte(seccompOption(network)))
	return hex.EncodeToString(sum[:])[:12]
}

// SeccompDigestOf returns the digest of the seccomp profile among a container's security
// options (as the engine reports them in HostConfig.SecurityOpt), and "" when it has none of
// its own (the engine's default, or unconfined).
func SeccompDigestOf(securityOpt []string) string {
	for _, o := range securityOpt {
		if strings.HasPrefix(o, "seccomp=") && o != "seccomp=unconfined" {
			sum := sha256.Sum256([]byte(o))
			return hex.EncodeToString(sum[:])[:12]
		}
	}
	return ""
}
