// Package fdpark parks a goroutine in Go's netpoller on a socket that
// other goroutines also use: a transport lends a blocking waiter its
// descriptor (engine.Blocker) without taking the socket's read lock, its
// deadlines or its registration from its own goroutines.
//
// A Parker registers the socket in an epoll set of its own, which it
// registers in the netpoller (a second entry there, with its own
// deadline), so that a read of the socket by either wakes only the
// goroutine parked on that entry, and Interrupt (an expired deadline on
// that entry) ends the park without touching the original. Its own set
// asks for input only: the netpoller registers every descriptor for
// output too, and a socket whose peer reads what it wrote becomes
// writable again (a Unix socket at every message), which woke a thread
// of the process from the netpoller for nothing at every message its peer
// read (a poke over shared memory, a sleeping ping-pong's request). A set
// of its own that asked for output too would do worse: any event makes the
// set readable, and the parked goroutine's callback would run for it.
// (provider/shm keeps a registration for output apart, which no goroutine
// waits on, for that early wake alone: its warmUp.)
package fdpark

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed is Wait's error once Close was called.
var ErrClosed = errors.New("fdpark: closed")

// Parker is one socket's second registration in the netpoller. Wait is
// for one goroutine at a time; Interrupt and Close for any.
type Parker struct {
	mu      sync.Mutex
	f       atomic.Pointer[os.File]
	rc      syscall.RawConn
	closed  bool
	waiting bool // a Wait is under way: it closes f when Close came meanwhile
	early   bool // Interrupt came before the registration
	sfd     int  // the duplicate of the socket that fn is given
	fn      func(fd uintptr) bool
	call    func(uintptr) bool // callFn, made once
}

// callFn is the netpoller's callback: fn on the socket (the descriptor
// the netpoller knows is the epoll set's).
func (p *Parker) callFn(uintptr) bool { return p.fn(uintptr(p.sfd)) }

// open duplicates the descriptor of sc (or fd, without sc) on first use.
func (p *Parker) open(sc syscall.RawConn, fd int) (syscall.RawConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	p.waiting = true
	if p.rc != nil {
		return p.rc, nil
	}
	defer func() {
		if p.early && p.rc != nil {
			p.early = false
			p.f.Load().SetReadDeadline(time.Unix(1, 0))
		}
	}()
	d, err := -1, error(nil)
	if sc == nil {
		d, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	} else if cerr := sc.Control(func(fd uintptr) { d, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		p.waiting = false
		return nil, cerr
	}
	if err != nil {
		p.waiting = false
		return nil, err
	}
	e, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err == nil {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(d)}
		if err = unix.EpollCtl(e, unix.EPOLL_CTL_ADD, d, &ev); err == nil {
			err = unix.SetNonblock(e, true)
		}
		if err != nil {
			unix.Close(e)
		}
	}
	if err != nil {
		p.waiting = false
		unix.Close(d)
		return nil, err
	}
	// Non-blocking: os.NewFile registers the set in the netpoller, which
	// sees it readable whenever the socket has input (or its end).
	f := os.NewFile(uintptr(e), "fdpark")
	rc, err := f.SyscallConn()
	if err != nil {
		p.waiting = false
		f.Close()
		unix.Close(d)
		return nil, err
	}
	p.sfd, p.call = d, p.callFn
	p.rc = rc
	p.f.Store(f)
	return rc, nil
}

// Wait calls fn with the socket's descriptor (a duplicate of sc's) and,
// while fn returns false, parks until the socket is readable and calls it
// again. It returns nil once fn returned true, ErrInterrupted after
// Interrupt, ErrClosed after Close, or the error of the registration.
func (p *Parker) Wait(sc syscall.RawConn, fn func(fd uintptr) bool) error {
	return p.wait(sc, -1, fn)
}

// WaitFD is Wait on a descriptor that is not a Go net.Conn's (a
// non-blocking socket of the caller's own): the caller keeps fd open
// until the first WaitFD returns, and Closes the Parker before it closes
// fd's socket for good.
func (p *Parker) WaitFD(fd int, fn func(fd uintptr) bool) error {
	return p.wait(nil, fd, fn)
}

func (p *Parker) wait(sc syscall.RawConn, fd int, fn func(fd uintptr) bool) error {
	rc, err := p.open(sc, fd)
	if err != nil {
		return err
	}
	p.fn = fn
	err = rc.Read(p.call)
	p.fn = nil
	p.mu.Lock()
	p.waiting = false
	if p.closed {
		// Close came during the Read (fn itself may have called it): the
		// file is closed here, once nothing uses it; os.File.Close would
		// wait for this Read to end.
		p.release()
		p.mu.Unlock()
		return ErrClosed
	}
	p.mu.Unlock()
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Clear the deadline before the caller looks for what the
		// Interrupt announced: an Interrupt after this look leaves its
		// deadline in force for the next Wait.
		if f := p.f.Load(); f != nil {
			f.SetReadDeadline(time.Time{})
		}
		return ErrInterrupted
	}
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// ErrInterrupted is Wait's error after Interrupt.
var ErrInterrupted = errors.New("fdpark: interrupted")

// Interrupt makes the Wait in progress, or the next one, return
// ErrInterrupted promptly.
func (p *Parker) Interrupt() {
	if f := p.f.Load(); f != nil {
		f.SetReadDeadline(time.Unix(1, 0))
		return
	}
	// No registration yet: the first Wait returns at once.
	p.mu.Lock()
	if f := p.f.Load(); f != nil {
		f.SetReadDeadline(time.Unix(1, 0))
	} else {
		p.early = true
	}
	p.mu.Unlock()
}

// Close ends a Wait in progress with ErrClosed and makes later ones fail.
// It may be called from Wait's fn.
func (p *Parker) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	f := p.f.Load()
	switch {
	case f == nil:
	case p.waiting:
		f.SetReadDeadline(time.Unix(1, 0)) // the Wait returns and closes it
	default:
		p.release()
	}
}

// release closes the epoll set and the socket's duplicate; p.mu is held,
// and no Wait is under way.
func (p *Parker) release() {
	if f := p.f.Load(); f != nil {
		p.f.Store(nil)
		f.Close()
		unix.Close(p.sfd)
	}
}
