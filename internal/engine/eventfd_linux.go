package engine

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// eventFD is a semaphore eventfd: readable while its counter is non-zero, so
// epoll sees a completion channel as ready exactly while events are queued.
type eventFD struct{ n int }

// noEventFD is no descriptor: its operations do nothing.
var noEventFD = eventFD{-1}

func newEventFD() (eventFD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_SEMAPHORE|unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return eventFD{-1}, os.NewSyscallError("eventfd", err)
	}
	return eventFD{fd}, nil
}

var one = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return }()

func (e eventFD) add() {
	if e.n >= 0 {
		unix.Write(e.n, one[:])
	}
}

func (e eventFD) take() {
	if e.n >= 0 {
		var b [8]byte
		unix.Read(e.n, b[:])
	}
}

func (e eventFD) fd() int { return e.n }

func (e eventFD) close() error {
	if e.n < 0 {
		return nil
	}
	return unix.Close(e.n)
}
