package executor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// sockDiagUID asks the kernel (netlink sock_diag, one exact lookup by addresses and ports)
// for the uid owning the TCP socket whose local end is local and remote end remote, in this
// network namespace, of family syscall.AF_INET or AF_INET6 (which holds IPv4 peers as
// IPv4-mapped addresses). It is what peerUID reads from /proc/net/tcp, without walking every
// socket's line: the kernel builds that file by walking its whole socket hash table, which
// took 4 to 7 ms per connection in a box on the 2-core CI machine. Errors: the kernel has no
// such lookup (gVisor, a seccomp filter), or no such socket (syscall.ENOENT).
func sockDiagUID(local, remote netip.AddrPort, family byte) (int, error) {
	const (
		sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
		reqLen           = 16 + 56
		msgIDOffset      = 16 + 4           // nlmsghdr, then inet_diag_msg's inet_diag_sockid
		msgUIDOffset     = 16 + 4 + 48 + 12 // and its uid
	)
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer syscall.Close(fd)

	req := make([]byte, reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], reqLen)
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], syscall.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence
	// inet_diag_req_v2: family, protocol, ext, pad, states; then inet_diag_sockid.
	req[16], req[17] = family, syscall.IPPROTO_TCP
	ne.PutUint32(req[20:], 0xffffffff) // every state
	id := req[24:]
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	putDiagAddr(id[4:20], local.Addr(), family)
	putDiagAddr(id[20:36], remote.Addr(), family)
	ne.PutUint32(id[36:], 0)          // any interface
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	// The kernel answers within the send: the answer is queued by now.
	buf := make([]byte, 1024)
	n, _, err := syscall.Recvfrom(fd, buf, syscall.MSG_DONTWAIT)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf = buf[:n]
	if len(buf) < 16 {
		return 0, errors.New("sock_diag: a short answer")
	}
	switch ne.Uint16(buf[4:]) {
	case sockDiagByFamily:
		if len(buf) < msgUIDOffset+4 {
			return 0, errors.New("sock_diag: a short answer")
		}
		if string(buf[msgIDOffset:msgIDOffset+36]) != string(id[:36]) {
			return 0, errors.New("sock_diag: the answer is about another socket")
		}
		return int(ne.Uint32(buf[msgUIDOffset:])), nil
	case syscall.NLMSG_ERROR:
		if len(buf) >= 20 {
			if errno := int32(ne.Uint32(buf[16:])); errno < 0 {
				return 0, fmt.Errorf("sock_diag: %w", syscall.Errno(-errno))
			}
		}
		return 0, errors.New("sock_diag: an error answer")
	default:
		return 0, fmt.Errorf("sock_diag: an answer of type %d", ne.Uint16(buf[4:]))
	}
}

// putDiagAddr writes a into an inet_diag_sockid address field (16 bytes, network order; an
// IPv4 address in the first 4 for AF_INET, IPv4-mapped for AF_INET6).
func putDiagAddr(dst []byte, a netip.Addr, family byte) {
	if family == syscall.AF_INET {
		v4 := a.Unmap().As4()
		copy(dst, v4[:])
		return
	}
	v6 := a.As16()
	copy(dst, v6[:])
}
