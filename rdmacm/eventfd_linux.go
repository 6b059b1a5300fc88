package rdmacm

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// eventFD is a semaphore eventfd: readable while its counter is non-zero,
// so that epoll sees an event channel as ready exactly while it holds
// events.
type eventFD struct{ n int }

func newEventFD() (eventFD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_SEMAPHORE|unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return eventFD{-1}, fmt.Errorf("rdmacm: event channel: %w", err)
	}
	return eventFD{fd}, nil
}

var one = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return }()

func (e eventFD) add() { unix.Write(e.n, one[:]) }

func (e eventFD) take() {
	var b [8]byte
	unix.Read(e.n, b[:])
}

func (e eventFD) fd() int { return e.n }

func (e eventFD) close() error { return unix.Close(e.n) }
