package cm

import (
	"context"
	"net"
	"sync"
)

// Acceptor is the part of a provider's Listener that does not depend on
// its protocol: it accepts connections on ln, runs the provider's handshake
// on each in a goroutine of its own, and queues the requests the handshakes
// produce until Next takes them. Requests still queued when the Acceptor
// closes are refused with reject.
type Acceptor[R any] struct {
	ln        net.Listener
	handshake func(net.Conn) (R, bool)
	reject    func(R)
	reqs      chan R
	done      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
}

// NewAcceptor starts accepting on ln. handshake reads a connection's request
// (ok false: the connection was refused or dropped, and closed by it).
func NewAcceptor[R any](ln net.Listener, handshake func(net.Conn) (R, bool), reject func(R)) *Acceptor[R] {
	a := &Acceptor[R]{ln: ln, handshake: handshake, reject: reject, reqs: make(chan R), done: make(chan struct{})}
	a.wg.Add(1)
	go a.acceptLoop()
	return a
}

func (a *Acceptor[R]) acceptLoop() {
	defer a.wg.Done()
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			return
		}
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

// Next waits for the next request.
func (a *Acceptor[R]) Next(ctx context.Context) (R, error) {
	var zero R
	select {
	case r := <-a.reqs:
		return r, nil
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
	return err
}
