package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Acceptor is the part of a provider's Listener that does not depend on
// its protocol: it accepts connections on ln, runs the provider's handshake
// on each in a goroutine of its own, and queues the requests the handshakes
// produce until Next takes them. Requests still queued when the Acceptor
// closes are refused with reject.
//
// A failed accept does not end it. Out of descriptors (EMFILE, ENFILE), it
// closes a descriptor it keeps in reserve, accepts the waiting connection
// and closes it at once, so that its dialer fails now rather than at its
// timeout, and takes the reserve again. Every failure (those, ENOBUFS,
// ENOMEM, ECONNABORTED, ...) is reported by the next Next, as an
// *AcceptError, and accepting goes on after a pause that doubles from 5 ms
// to 1 s while failures last.
type Acceptor[R any] struct {
	ln        net.Listener
	handshake func(net.Conn) (R, bool)
	reject    func(R)
	reqs      chan R
	errs      chan error // the latest accept failure not yet reported
	done      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
	spare     *os.File // a descriptor held in reserve for shedding (acceptLoop's)
	spareOnce sync.Once
}

// AcceptError is a failure to accept a connection: the listener goes on.
// It wraps the system's error (errors.Is(err, syscall.EMFILE) holds when
// the process was out of descriptors).
type AcceptError struct {
	Err error
	// Shed says that a connection was accepted and closed at once (its
	// dialer was refused) for want of descriptors.
	Shed bool
}

func (e *AcceptError) Error() string {
	if e.Shed {
		return fmt.Sprintf("accept: %v (a connection request was refused; still listening)", e.Err)
	}
	return fmt.Sprintf("accept: %v (still listening)", e.Err)
}

func (e *AcceptError) Unwrap() error { return e.Err }

// Temporary reports true: the listener goes on (as net.Error's).
func (e *AcceptError) Temporary() bool { return true }

// Timeout reports false.
func (e *AcceptError) Timeout() bool { return false }

// NewAcceptor starts accepting on ln. handshake reads a connection's request
// (ok false: the connection was refused or dropped, and closed by it).
func NewAcceptor[R any](ln net.Listener, handshake func(net.Conn) (R, bool), reject func(R)) *Acceptor[R] {
	a := &Acceptor[R]{ln: ln, handshake: handshake, reject: reject, reqs: make(chan R), errs: make(chan error, 1), done: make(chan struct{})}
	a.spare, _ = os.Open(os.DevNull) // without one, shedding waits for a descriptor to be freed
	a.wg.Add(1)
	go a.acceptLoop()
	return a
}

const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
)

func (a *Acceptor[R]) acceptLoop() {
	defer a.wg.Done()
	var pause time.Duration
	failing := false // since the last connection accepted
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			select {
			case <-a.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			ae := &AcceptError{Err: err}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// accept(2) fails so whether or not a connection waits:
				// shed one if one does.
				ae.Shed = a.shed()
			}
			if ae.Shed || !failing {
				a.report(ae) // each refusal, and the first failure of a run
			}
			failing = true
			if ae.Shed {
				continue // more may wait
			}
			pause = min(max(2*pause, acceptPauseMin), acceptPauseMax)
			select {
			case <-time.After(pause):
			case <-a.done:
				return
			}
			continue
		}
		pause, failing = 0, false
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			r, ok := a.handshake(nc)
			if !ok {
				return
			}
			select {
			case a.reqs <- r:
			case <-a.done:
				a.reject(r)
			}
		}()
	}
}

// shed frees the reserve descriptor, accepts a connection waiting in the
// backlog, if one does, and closes it at once, and takes the reserve
// again; it reports whether a connection was shed.
func (a *Acceptor[R]) shed() bool {
	if a.spare == nil {
		a.spare, _ = os.Open(os.DevNull)
		return false
	}
	sc, ok := a.ln.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	a.spare.Close()
	a.spare = nil
	shed := false
	rc.Control(func(fd uintptr) {
		// Not the listener's Accept, which would wait for a connection.
		nfd, _, err := syscall.Accept4(int(fd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err == nil {
			syscall.Close(nfd)
			shed = true
		}
	})
	a.spare, _ = os.Open(os.DevNull)
	return shed
}

// report keeps err for the next Next (the latest of several).
func (a *Acceptor[R]) report(err error) {
	for {
		select {
		case a.errs <- err:
			return
		default:
		}
		select {
		case <-a.errs:
		default:
		}
	}
}

// Next waits for the next request. An *AcceptError says that accepting
// failed since the last call; the acceptor goes on, and Next may be
// called again.
func (a *Acceptor[R]) Next(ctx context.Context) (R, error) {
	var zero R
	select {
	case r := <-a.reqs:
		return r, nil
	case err := <-a.errs:
		return zero, err
	case <-a.done:
		return zero, ErrClosed
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Addr returns the listening address.
func (a *Acceptor[R]) Addr() net.Addr { return a.ln.Addr() }

// Close stops accepting, refuses the requests not taken, and waits for the
// handshakes in progress.
func (a *Acceptor[R]) Close() error {
	var err error
	a.once.Do(func() {
		close(a.done)
		err = a.ln.Close()
	})
	a.wg.Wait()
	a.spareOnce.Do(func() {
		if a.spare != nil {
			a.spare.Close()
		}
	})
	return err
}
