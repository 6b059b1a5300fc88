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
