package blocking

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawSock is a kernel socket read and written as goverbs' transports read
// and write theirs: parked in the netpoller through the connection's own
// registration, each read(2) and write(2) a raw system call, without the
// scheduler's syscall bookkeeping that net.Conn's calls go through. The
// "unixraw" and "tcpraw" rows measure it: the same socket ping-pong, less
// the runtime's entersyscall, which wakes the process's sleeping sysmon
// thread; with it the kernel keeps both processes of a sleeping ping-pong
// on one vCPU, without it they settle on two and every wake-up crosses.
type rawSock struct{ rc syscall.RawConn }

func newRawSock(c net.Conn) (io.ReadWriter, error) {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	return &rawSock{rc}, nil
}

func (s *rawSock) Read(p []byte) (int, error) {
	var n uintptr
	var e syscall.Errno
	err := s.rc.Read(func(fd uintptr) bool {
		n, _, e = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		return e != unix.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, e
	case n == 0:
		return 0, io.EOF
	}
	return int(n), nil
}

func (s *rawSock) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		var n uintptr
		var e syscall.Errno
		err := s.rc.Write(func(fd uintptr) bool {
			n, _, e = unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
			return e != unix.EAGAIN
		})
		if err != nil {
			return done, err
		}
		if e != 0 {
			return done, e
		}
		done += int(n)
	}
	return done, nil
}
