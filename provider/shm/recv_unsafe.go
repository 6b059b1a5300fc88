package shm

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvNB is one non-blocking recvmsg(2) of a message into b and its
// control data into oob, asking for no address: x/sys's Recvmsg reads the
// sender's, and a socket accepted from a listener with a name has one,
// which it allocates on every call. b is not empty.
func recvNB(fd int, b, oob []byte) (n, oobn int, err error) {
	var iov unix.Iovec
	iov.Base = &b[0]
	iov.SetLen(len(b))
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.Iovlen = 1
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}
