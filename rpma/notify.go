package rpma

import (
	"sync"
	"syscall"
)

// notifier is a file descriptor that is readable while a count of pending
// items is positive: a pipe holding one byte while count > 0. It lets
// event-loop code (epoll) wait for connection requests and events.
type notifier struct {
	mu     sync.Mutex
	r, w   int
	count  int
	closed bool
}

func newNotifier() (*notifier, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, provider("pipe", err)
	}
	return &notifier{r: p[0], w: p[1]}, nil
}

func (n *notifier) add() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if n.count == 0 {
		syscall.Write(n.w, []byte{1})
	}
	n.count++
}

func (n *notifier) take() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.count == 0 {
		return
	}
	n.count--
	if n.count == 0 {
		var b [1]byte
		syscall.Read(n.r, b[:])
	}
}

func (n *notifier) fd() int { return n.r }

func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	syscall.Close(n.r)
	syscall.Close(n.w)
}
