// Package fdpark parks a goroutine in Go's netpoller on a socket that
// other goroutines also use: a transport lends a blocking waiter its
// descriptor (engine.Blocker) without taking the socket's read lock, its
// deadlines or its registration from its own goroutines.
//
// A Parker registers a duplicate of the descriptor (the same socket, a
// second entry in the netpoller's epoll set, with its own deadline), so
// that a read of the socket by either wakes only the goroutine parked on
// that entry, and Interrupt (an expired deadline on the duplicate) ends the
// park without touching the original.
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
}

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
	// The duplicate shares the socket's non-blocking flag (it is the
	// open file's): os.NewFile registers it in the netpoller.
	f := os.NewFile(uintptr(d), "fdpark")
	rc, err := f.SyscallConn()
	if err != nil {
		p.waiting = false
		f.Close()
		return nil, err
	}
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
	err = rc.Read(fn)
	p.mu.Lock()
	p.waiting = false
	if p.closed {
		// Close came during the Read (fn itself may have called it): the
		// file is closed here, once nothing uses it; os.File.Close would
		// wait for this Read to end.
		if f := p.f.Load(); f != nil {
			f.Close()
		}
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
// ErrInterrupted promptly (once the first Wait has begun: there is no
// registration before, and nothing to interrupt).
func (p *Parker) Interrupt() {
	if f := p.f.Load(); f != nil {
		f.SetReadDeadline(time.Unix(1, 0))
	}
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
		f.Close()
	}
}
