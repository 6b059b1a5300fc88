package iwarp

import (
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readv2 reads into a, then b, with one readv(2) and no allocation: the end
// of a payload straight into its target memory, and what follows it (the
// trailer and the next header) into the staging buffer. The socket is
// non-blocking, so RawSyscall is safe (see rawRead).
func readv2(fd int, iov *[2]unix.Iovec, a, b []byte) (int, error) {
	iov[0].Base, iov[1].Base = &a[0], &b[0]
	iov[0].SetLen(len(a))
	iov[1].SetLen(len(b))
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), 2)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return 0, errWouldBlock
		case e != 0:
			return 0, e
		case n == 0:
			return 0, io.EOF
		}
		return int(n), nil
	}
}

// rawRead is read(2) on a non-blocking socket without telling the scheduler
// (RawSyscall): it never blocks, and a busy-polling loop of ordinary
// syscalls lets the runtime hand the goroutine's P away whenever one takes
// long, which shows as latency spikes.
func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// writevNB writes bufs (at most len(iov) of them) with one non-blocking
// writev(2) and returns how many bytes the socket took (0 when it would block).
func writevNB(fd int, iov []unix.Iovec, bufs [][]byte) (int, error) {
	n := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		iov[n].Base = &b[0]
		iov[n].SetLen(len(b))
		n++
	}
	if n == 0 {
		return 0, nil
	}
	// One buffer (a request, a control message) goes with write(2), which
	// the kernel takes a little faster than a writev of one element.
	call, arg := uintptr(unix.SYS_WRITEV), uintptr(unsafe.Pointer(&iov[0]))
	if n == 1 {
		call, arg, n = unix.SYS_WRITE, uintptr(unsafe.Pointer(iov[0].Base)), int(iov[0].Len)
	}
	for {
		w, _, e := unix.RawSyscall(call, uintptr(fd), arg, uintptr(n))
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return 0, nil
		case e != 0:
			return 0, e
		}
		return int(w), nil
	}
}
