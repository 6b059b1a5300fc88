package rpma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/goverbs/goverbs/rdmacm"
)

// Ep is a listening endpoint (struct rpma_ep): it receives connection
// requests, which NextConnReq returns.
type Ep struct {
	peer *Peer
	id   *rdmacm.ID
	reqs chan *rdmacm.ID
	note *notifier

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	down   bool
	port   string // over shm, the port given to Listen
	err    error  // why the listener stopped
}

// Listen starts listening for connections at addr and port (rpma_ep_listen);
// port "0" picks a free port (see Addr). It returns ErrInval for a nil peer
// or a bad address, and ErrProvider when listening fails.
func (p *Peer) Listen(addr, port string) (*Ep, error) {
	switch {
	case p == nil:
		return nil, wrap(ErrInval, "no peer (NewPeer)")
	case addr == "":
		return nil, wrap(ErrInval, "no address to listen at")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, wrap(ErrInval, "port %q is not a number from 0 to 65535", port)
	}
	id, err := rdmacm.Listen(cmAddr(addr, port))
	if err != nil {
		return nil, provider("rdma_listen", err)
	}
	if id.DeviceContext() != p.ctx {
		id.Close()
		return nil, wrap(ErrInval, "the peer's device context is not the one that serves connections (use DeviceContext)")
	}
	e := &Ep{peer: p, id: id, reqs: make(chan *rdmacm.ID, 64)}
	if strings.HasPrefix(addr, "unix:") {
		e.port = port
	}
	if e.note, err = newNotifier(); err != nil {
		id.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go e.accept(ctx)
	return e, nil
}

// accept queues incoming requests for NextConnReq.
func (e *Ep) accept(ctx context.Context) {
	defer e.wg.Done()
	for {
		r, err := e.id.GetRequest(ctx)
		if err != nil {
			e.mu.Lock()
			e.err = err
			e.mu.Unlock()
			close(e.reqs)
			return
		}
		e.note.add() // before the hand-over, as Conn's events (see start)
		select {
		case e.reqs <- r:
		case <-ctx.Done():
			e.note.take()
			r.Reject(nil)
			r.Close()
		}
	}
}

// Addr returns the address the endpoint listens on.
func (e *Ep) Addr() net.Addr { return e.id.LocalAddr() }

// Port returns the port the endpoint listens on (over shm: the port it was
// given).
func (e *Ep) Port() string {
	if a, ok := e.Addr().(*net.TCPAddr); ok {
		return strconv.Itoa(a.Port)
	}
	if e.port != "" {
		return e.port
	}
	a := e.Addr()
	if ra, ok := a.(*rdmacm.Addr); ok {
		a = ra.Addr // the transport's own, without the scheme
	}
	_, port, _ := net.SplitHostPort(a.String())
	return port
}

// Fd returns a file descriptor that is readable while a connection request
// is waiting (rpma_ep_get_fd).
func (e *Ep) Fd() int { return e.note.fd() }

// NextConnReq waits for the next connection request and prepares it with
// cfg (nil: the defaults) (rpma_ep_next_conn_req): its QP and CQs are
// created, its private data is available. Answer it with Connect or
// Delete. It returns ErrNoEvent (wrapping ctx's error) when ctx ends
// first, ErrInval after Shutdown, and ErrProvider when the listener failed
// or the request's QP cannot be created (the request is then rejected).
func (e *Ep) NextConnReq(ctx context.Context, cfg *ConnCfg) (*ConnReq, error) {
	if e == nil {
		return nil, wrap(ErrInval, "nil endpoint")
	}
	select {
	case id, ok := <-e.reqs:
		if !ok {
			e.mu.Lock()
			err, down := e.err, e.down
			e.mu.Unlock()
			// After Shutdown the listener's last error depends on where
			// the accepting goroutine was (cancelled, closed, no longer
			// listening): the shutdown is what the caller must see.
			if down || errors.Is(err, rdmacm.ErrClosed) || errors.Is(err, context.Canceled) {
				return nil, wrap(ErrInval, "the endpoint was shut down")
			}
			return nil, provider("rdma_get_request", err)
		}
		e.note.take()
		r := &ConnReq{peer: e.peer, id: id, cfg: *cfg.orDefault(), passive: true}
		if err := r.setup(); err != nil {
			id.Reject(nil)
			id.Close()
			return nil, err
		}
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("rpma: %w: %w", ErrNoEvent, ctx.Err())
	}
}

// Shutdown stops listening (rpma_ep_shutdown); requests not taken yet are
// rejected.
func (e *Ep) Shutdown() error {
	if e == nil {
		return wrap(ErrInval, "nil endpoint")
	}
	e.mu.Lock()
	if e.down {
		e.mu.Unlock()
		return nil
	}
	e.down = true
	e.mu.Unlock()
	e.cancel()
	err := e.id.Close()
	e.wg.Wait()
	for id := range e.reqs {
		id.Reject(nil)
		id.Close()
	}
	e.note.close()
	if err != nil {
		return provider("rdma_destroy_id", err)
	}
	return nil
}
