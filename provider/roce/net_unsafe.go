package roce

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockaddr is room for an IPv4 or IPv6 socket address, kept by the caller
// so that the system calls below allocate nothing.
type sockaddr struct {
	raw unix.RawSockaddrInet6 // the larger of the two
	n   uint32
}

// recvNB receives one datagram into b without blocking (RawSyscall: the
// socket is non-blocking) and returns its length and source; it returns
// unix.EAGAIN when there is none.
func recvNB(fd int, b []byte, sa *sockaddr) (int, netip.AddrPort, error) {
	for {
		sa.n = uint32(unsafe.Sizeof(sa.raw))
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&sa.raw)), uintptr(unsafe.Pointer(&sa.n)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, netip.AddrPort{}, e
		}
		return int(n), sa.addrPort(), nil
	}
}

func (sa *sockaddr) addrPort() netip.AddrPort {
	switch sa.raw.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa.raw))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:]))
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.raw.Addr).Unmap(), binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.raw.Port))[:]))
	}
	return netip.AddrPort{}
}

func (sa *sockaddr) set(to netip.AddrPort) {
	sa.raw = unix.RawSockaddrInet6{}
	a := to.Addr()
	if a.Is4() {
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa.raw))
		p.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&p.Port))[:], to.Port())
		p.Addr = a.As4()
		sa.n = uint32(unsafe.Sizeof(*p))
		return
	}
	sa.raw.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.raw.Port))[:], to.Port())
	sa.raw.Addr = a.As16()
	sa.n = uint32(unsafe.Sizeof(sa.raw))
}

// sendNB sends b to sa without blocking; unix.EAGAIN when the socket's
// buffer is full.
func sendNB(fd int, b []byte, sa *sockaddr) error {
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&sa.raw)), uintptr(sa.n))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
