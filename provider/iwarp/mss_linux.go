package iwarp

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// mss returns the connection's TCP MSS, the FPDU size siw uses.
func mss(nc net.Conn) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 1460
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 1460
	}
	v := 0
	rc.Control(func(fd uintptr) {
		v, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	})
	if err != nil || v <= 0 {
		return 1460
	}
	return v
}

// setDeadPeer arms TCP_USER_TIMEOUT and keepalive so that a silent peer is
// detected within about d.
func setDeadPeer(nc net.Conn, d time.Duration) {
	tc, ok := nc.(*net.TCPConn)
	if !ok || d <= 0 {
		return
	}
	idle := max(d/3, time.Second)
	tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: max(d/6, time.Second), Count: 3})
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}

// quiet raises (or, with on false, restores) the socket's receive low-water
// mark. While the application busy-polls the socket, arrivals then stop
// waking the Go netpoller: with edge-triggered epoll every arriving segment
// would otherwise wake an idle runtime thread blocked in epoll_wait (one
// context switch each, about 10k/s when streaming), which then finds nothing
// to do. Non-blocking reads are not affected: they return what is queued.
// The mark is half the receive buffer: a larger one makes the kernel grow
// the buffer to match (to 32 MiB per connection here, against the 1-4 MiB
// autotuning settles at), and the buffer rarely holds more. The kernel
// still signals a FIN, memory pressure or a closing window.
func quiet(fd int, on bool) {
	v := 1
	if on {
		b, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil || b < 4 {
			return
		}
		v = b / 2
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, v)
}
