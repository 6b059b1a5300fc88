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

// gsoMsg is a sendmsg(2) with a UDP_SEGMENT control message, kept by its
// batch so that sending allocates nothing.
type gsoMsg struct {
	hdr unix.Msghdr
	iov []unix.Iovec                 // room for a batch's pieces
	oob [unix.SizeofCmsghdr + 8]byte // CMSG_SPACE(sizeof(uint16))
}

// sendGSO sends the concatenation of vec's pieces as datagrams of seg
// bytes each (the last may be shorter) with one system call: the kernel
// gathers the pieces and cuts them apart (UDP GSO), giving datagram i the
// IPv4 identification i. With seg 0 they are one datagram.
func sendGSO(fd int, vec [][]byte, seg int, sa *sockaddr, m *gsoMsg) error {
	n := m.prepare(vec, seg, sa)
	defer clear(m.iov[:n]) // let go of the memory regions
	for {
		_, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdr)), unix.MSG_DONTWAIT)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// prepare sets m's header for vec's pieces, as datagrams of seg bytes, to
// sa; it returns how many iovecs it filled.
func (m *gsoMsg) prepare(vec [][]byte, seg int, sa *sockaddr) int {
	n := 0
	for _, p := range vec {
		if len(p) > 0 {
			m.iov[n].Base = &p[0]
			m.iov[n].SetLen(len(p))
			n++
		}
	}
	m.hdr.Name = (*byte)(unsafe.Pointer(&sa.raw))
	m.hdr.Namelen = sa.n
	m.hdr.Iov = &m.iov[0]
	m.hdr.SetIovlen(n)
	if seg > 0 {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&m.oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafe.Pointer(&m.oob[unix.CmsgLen(0)])) = uint16(seg)
		m.hdr.Control = &m.oob[0]
		m.hdr.SetControllen(unix.CmsgSpace(2))
	} else {
		m.hdr.Control = nil
		m.hdr.SetControllen(0)
	}
	return n
}

// preMsg is the sendmmsg(2) of a datagram ahead of a GSO batch (gsoMsg),
// kept by its batch so that sending allocates nothing.
type preMsg struct {
	mm  [2]mmsghdr
	iov unix.Iovec
}

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32 // (Go pads the struct to its alignment, as C does)
}

// sendPre sends datagram pre and then the batch m (built by sendGSO's
// caller as for sendGSO: vec's pieces as datagrams of seg bytes) with one
// system call. It returns how many of the two went: 1 means pre alone,
// and the batch is still to send.
func sendPre(fd int, pre []byte, vec [][]byte, seg int, sa *sockaddr, m *gsoMsg, p *preMsg) (int, error) {
	n := m.prepare(vec, seg, sa)
	defer clear(m.iov[:n]) // let go of the memory regions
	p.iov.Base = &pre[0]
	p.iov.SetLen(len(pre))
	p.mm[0].hdr = unix.Msghdr{Name: m.hdr.Name, Namelen: m.hdr.Namelen, Iov: &p.iov}
	p.mm[0].hdr.SetIovlen(1)
	p.mm[1].hdr = m.hdr
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&p.mm[0])), 2, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// groMsg is a recvmsg(2) that learns the segment size of datagrams the
// kernel delivered together (UDP GRO).
type groMsg struct {
	hdr unix.Msghdr
	iov unix.Iovec
	oob [64]byte
}

// recvGRO receives into b without blocking; seg is the size of each of
// the datagrams b holds (all but the last, which may be shorter), or n
// when it holds one.
func recvGRO(fd int, b []byte, sa *sockaddr, m *groMsg) (n, seg int, from netip.AddrPort, err error) {
	m.iov.Base = &b[0]
	m.iov.SetLen(len(b))
	m.hdr.Name = (*byte)(unsafe.Pointer(&sa.raw))
	m.hdr.Iov = &m.iov
	m.hdr.SetIovlen(1)
	m.hdr.Control = &m.oob[0]
	for {
		m.hdr.Namelen = uint32(unsafe.Sizeof(sa.raw))
		m.hdr.SetControllen(len(m.oob))
		r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdr)), unix.MSG_DONTWAIT)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, 0, netip.AddrPort{}, e
		}
		n, seg = int(r), int(r)
		// The one control message asked for: UDP_GRO, an int.
		if cl := int(m.hdr.Controllen); cl >= unix.CmsgLen(4) {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&m.oob[0]))
			if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
				if s := int(*(*int32)(unsafe.Pointer(&m.oob[unix.CmsgLen(0)]))); s > 0 && s < n {
					seg = s
				}
			}
		}
		sa.n = m.hdr.Namelen
		return n, seg, sa.addrPort(), nil
	}
}
