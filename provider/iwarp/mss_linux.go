package iwarp

import (
	"net"
	"syscall"

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
