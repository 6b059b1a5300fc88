package roce

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/fdpark"
)

// A socket is a UDP socket used by its descriptor, outside Go's netpoller.
// A descriptor the runtime polls (a net.UDPConn's) has an epoll waiter on
// the socket's wait queue for good, and then every datagram that arrives,
// and every one sent that the peer consumes (its buffer space returns),
// wakes a runtime thread sleeping in epoll_wait that has nothing to do: a
// thread wake-up, on a virtual machine an inter-processor interrupt, per
// GSO batch and per ACK, paid by whoever queued or freed the datagram. On
// loopback that cost a third of the bandwidth (a C sender and receiver
// with an idle epoll waiter on their sockets, 5.1 -> 3.0 GB/s; see
// bench/results/roce-loopback). So sends and receives never block in the
// kernel (MSG_DONTWAIT), a wait for data or room is poll(2) for that wait
// alone, and the device's goroutine sleeps in poll(2) only while no
// application polls.
type socket struct {
	fd   int
	port uint16 // the local UDP port
	// refs counts the uses in progress, plus sockShut once shut: a use
	// may start only before, and the descriptor closes when the last
	// ends (a count, not a lock: a use nests in another, as a poll that
	// receives sends an ACK from the same socket).
	refs atomic.Int64
	// park is a blocking waiter's registration of the socket (qp.Block).
	park fdpark.Parker
}

const sockShut = 1 << 40

// openSocket opens a non-blocking UDP socket bound to ap (port 0: an
// ephemeral one).
func openSocket(ap netip.AddrPort) (*socket, error) {
	a := ap.Addr()
	fam := unix.AF_INET
	if !a.Is4() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("listen udp %v: %w", ap, os.NewSyscallError("socket", err))
	}
	var sa unix.Sockaddr
	if fam == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		s6 := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
		if z := a.Zone(); z != "" {
			if ifc, err := net.InterfaceByName(z); err == nil {
				s6.ZoneId = uint32(ifc.Index)
			}
		}
		sa = s6
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen udp %v: %w", ap, os.NewSyscallError("bind", err))
	}
	s := &socket{fd: fd, port: ap.Port()}
	if got, err := unix.Getsockname(fd); err == nil {
		switch g := got.(type) {
		case *unix.SockaddrInet4:
			s.port = uint16(g.Port)
		case *unix.SockaddrInet6:
			s.port = uint16(g.Port)
		}
	}
	return s, nil
}

// acquire starts a use of the descriptor; false once the socket is shut.
func (s *socket) acquire() bool {
	if s.refs.Add(1) >= sockShut {
		s.refs.Add(-1)
		return false
	}
	return true
}

// release ends a use.
func (s *socket) release() { s.refs.Add(-1) }

// shut refuses new uses and ends waits for room (close follows).
func (s *socket) shut() {
	s.park.Close() // a waiter blocked in it lets go of its use
	for {
		n := s.refs.Load()
		if n >= sockShut || s.refs.CompareAndSwap(n, n+sockShut) {
			return
		}
	}
}

// isShut reports whether shut was called.
func (s *socket) isShut() bool { return s.refs.Load() >= sockShut }

// close shuts the socket and closes the descriptor once the uses in
// progress have ended (once: a second close returns).
func (s *socket) close() {
	s.shut()
	for {
		n := s.refs.Load()
		if n >= 2*sockShut {
			return // closed
		}
		if n == sockShut && s.refs.CompareAndSwap(n, 2*sockShut) {
			unix.Close(s.fd)
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// waitWritable waits until the socket's buffer has room or a while has
// passed (the caller tries again); false once the socket is shut.
func (s *socket) waitWritable() bool {
	if s.isShut() {
		return false
	}
	pfd := [1]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLOUT}}
	unix.Poll(pfd[:], 10)
	return !s.isShut()
}
