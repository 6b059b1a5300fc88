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
	// Raw: a non-blocking call needs none of the scheduler's syscall
	// bookkeeping, whose entersyscall wakes a sleeping sysmon (a futex
	// wake and a thread switch, measured as a few percent of a gRPC
	// call's CPU between two processes).
	r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}

// sendNB is one non-blocking send(2) of b (not empty), raw as recvNB.
func sendNB(fd int, b []byte) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
