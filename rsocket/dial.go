package rsocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// connParam are the connection parameters rsocket uses: it issues no RDMA
// READ of its own, but asks for one outstanding (librdmacm works around
// iWARP devices that read during connection setup that way).
func connParam(private []byte) *rdmacm.ConnParam {
	return &rdmacm.ConnParam{
		PrivateData:        private,
		ResponderResources: 1,
		InitiatorDepth:     1,
		RetryCount:         7,
		RNRRetryCount:      7,
	}
}

// Dial connects to the rsocket listener at addr, an address of package
// rdmacm ("host:port" over iWARP, "unix:@name" or "unix:/path" over shared
// memory, "roce://host:port" over RoCEv2), and returns a *Conn. Its
// signature is that of net.Dialer.DialContext without the network, so it
// serves as grpc.WithContextDialer(rsocket.Dial) as it is.
func Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(ctx, addr)
}

// Options size a connection's resources, as rsetsockopt does in
// librdmacm's rsocket (SO_SNDBUF, SO_RCVBUF, RDMA_SQSIZE, RDMA_RQSIZE).
// The zero value, and every zero field, means the default. A value below
// the least a connection works with (4 KiB, 16 requests) is refused.
type Options struct {
	// SendBuffer (SO_SNDBUF) is the registered memory writes are staged
	// in; 0 means 512 KiB.
	SendBuffer int
	// RecvBuffer (SO_RCVBUF) is the receive buffer the peer writes into,
	// in two halves; 0 means 512 KiB.
	RecvBuffer int
	// SendQueue (RDMA_SQSIZE) is the data work requests outstanding; 0
	// means 256.
	SendQueue int
	// RecvQueue (RDMA_RQSIZE) is the receive credits offered to the peer
	// (messages); 0 means 256.
	RecvQueue int
	// Spin is the most a blocked Read or Write polls before it sleeps (a
	// woken goroutine costs tens of microseconds): 0 means 300 µs, a
	// negative value none. The spin adapts below it as a CQ's does
	// (verbs.AdaptiveSpin, verbs.CQ.SetWaitSpin): spent while recent
	// waits were over within Spin, halving with each that lasted longer,
	// down to none.
	Spin time.Duration
}

func (o Options) setup(s connSetup) connSetup {
	s.sq, s.rq, s.sbuf, s.rbuf, s.spin = o.SendQueue, o.RecvQueue, o.SendBuffer, o.RecvBuffer, o.Spin
	return s
}

func (o Options) check() error {
	if o.SendBuffer < 0 || o.RecvBuffer < 0 || o.SendQueue < 0 || o.RecvQueue < 0 {
		return fmt.Errorf("%w: negative size in %+v", verbs.ErrInvalid, o)
	}
	return nil
}

// Dialer dials with Options; its zero value dials as Dial does.
type Dialer struct {
	Options Options
}

// DialContext connects to addr as Dial does, with d's options. Its
// signature is Dial's, so a method value serves as grpc's context dialer.
func (d *Dialer) DialContext(ctx context.Context, addr string) (net.Conn, error) {
	c, err := dial(ctx, addr, d.Options)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: strAddr(addr), Err: err}
	}
	return c, nil
}

func dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	vctx, pd, err := rdmacm.DeviceContext(addr)
	if err != nil {
		return nil, err
	}
	id, err := rdmacm.CreateID(addr)
	if err != nil {
		return nil, err
	}
	c, err := newConn(o.setup(connSetup{ctx: vctx, pd: pd}))
	if err != nil {
		id.Close()
		return nil, err
	}
	c.closeFn = id.Close
	if err := id.CreateQP(pd, c.qpAttr()); err != nil {
		c.free()
		return nil, err
	}
	if err := c.postInitialRecvs(id.QP()); err != nil {
		c.free()
		return nil, err
	}
	if err := id.Connect(ctx, connParam(c.localData())); err != nil {
		c.free()
		return nil, err
	}
	c.laddr, c.raddr = id.LocalAddr(), id.RemoteAddr()
	if err := c.start(id.PrivateData()); err != nil {
		c.free()
		return nil, err
	}
	return c, nil
}

// Listener accepts rsocket connections. It implements net.Listener, so
// that grpc.Server.Serve and http.Serve take it as it is.
type Listener struct {
	id     *rdmacm.ID
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	opts   Options
}

// Listen listens for rsocket connections at addr (see Dial for the forms;
// port 0 picks a free port, which Addr tells).
func Listen(addr string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(addr)
}

// ListenConfig listens with Options for the connections it accepts; its
// zero value listens as Listen does.
type ListenConfig struct {
	Options Options
}

// Listen listens at addr as the function Listen does, with lc's options.
func (lc *ListenConfig) Listen(addr string) (*Listener, error) {
	if err := lc.Options.check(); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: strAddr(addr), Err: err}
	}
	id, err := rdmacm.Listen(addr)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: strAddr(addr), Err: err}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Listener{id: id, addr: addr, ctx: ctx, cancel: cancel, opts: lc.Options}, nil
}

// Accept waits for the next connection and returns it, a *Conn. A
// request that does not speak rsocket is rejected and Accept goes on
// waiting; a failure to take a connection (out of descriptors or memory)
// is returned as a temporary error, and the listener keeps listening.
// After Close it returns net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		req, err := l.id.GetRequest(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				err = net.ErrClosed
			}
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.Addr(), Err: err}
		}
		c, err := l.accept(req)
		if err != nil {
			if l.ctx.Err() != nil {
				return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.Addr(), Err: net.ErrClosed}
			}
			var ae *rdmacm.AcceptError
			if errors.As(err, &ae) {
				return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.Addr(), Err: err}
			}
			continue // that one peer failed; the listener goes on
		}
		return c, nil
	}
}

func (l *Listener) accept(req *rdmacm.ID) (*Conn, error) {
	var d connData
	if err := d.decode(req.PrivateData()); err != nil {
		req.Reject(nil)
		req.Close()
		return nil, err
	}
	pd := req.PD()
	if pd == nil {
		var err error
		if _, pd, err = rdmacm.DeviceContext(l.addr); err != nil {
			req.Reject(nil)
			req.Close()
			return nil, err
		}
	}
	c, err := newConn(l.opts.setup(connSetup{ctx: req.DeviceContext(), pd: pd}))
	if err != nil {
		req.Reject(nil)
		req.Close()
		return nil, err
	}
	c.closeFn = req.Close
	if err := req.CreateQP(pd, c.qpAttr()); err != nil {
		req.Reject(nil)
		c.free()
		return nil, err
	}
	if err := c.postInitialRecvs(req.QP()); err != nil {
		req.Reject(nil)
		c.free()
		return nil, err
	}
	if err := req.Accept(l.ctx, connParam(c.localData())); err != nil {
		c.free()
		return nil, err
	}
	c.laddr, c.raddr = req.LocalAddr(), req.RemoteAddr()
	if err := c.start(req.PrivateData()); err != nil {
		c.free()
		return nil, err
	}
	return c, nil
}

// Close stops listening; a blocked Accept returns net.ErrClosed.
// Connections accepted before stay open. A second Close returns nil.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.id.Close()
	})
	return err
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr {
	if a := l.id.LocalAddr(); a != nil {
		return a
	}
	return strAddr(l.addr)
}

// strAddr is an address as the user wrote it.
type strAddr string

func (a strAddr) Network() string { return "rdma" }
func (a strAddr) String() string  { return string(a) }

// loopAddr names one end of a Pipe.
type loopAddr struct{ qpn uint32 }

func (a loopAddr) Network() string { return "rdma-loop" }
func (a loopAddr) String() string  { return fmt.Sprintf("loop0/qp%d", a.qpn) }

// Pipe returns the two ends of a connection inside this process, over the
// loop provider's queue pairs: the rsocket protocol with no connection
// manager, as net.Pipe is for net.Conn (for tests).
func Pipe() (*Conn, *Conn, error) {
	vctx, err := verbs.OpenDevice("loop0")
	if err != nil {
		return nil, nil, err
	}
	pd, err := vctx.AllocPD()
	if err != nil {
		vctx.Close()
		return nil, nil, err
	}
	// The device context and PD live until both ends are closed.
	var refs atomic.Int32
	refs.Store(2)
	unref := func() {
		if refs.Add(-1) == 0 {
			pd.Dealloc()
			vctx.Close()
		}
	}
	mk := func() (*Conn, error) {
		c, err := newConn(connSetup{ctx: vctx, pd: pd})
		if err != nil {
			unref()
			return nil, err
		}
		c.closeFn = func() error {
			var err error
			if c.qp != nil {
				err = c.qp.Destroy()
			}
			unref()
			return err
		}
		if c.qp, err = pd.CreateQP(c.qpAttr()); err != nil {
			c.free()
			return nil, err
		}
		return c, nil
	}
	a, err := mk()
	if err != nil {
		unref()
		return nil, nil, err
	}
	b, err := mk()
	if err != nil {
		a.free()
		return nil, nil, err
	}
	fail := func(err error) (*Conn, *Conn, error) {
		a.free()
		b.free()
		return nil, nil, err
	}
	if err := loop.Connect(a.qp, b.qp); err != nil {
		return fail(err)
	}
	if err := a.postInitialRecvs(a.qp); err != nil {
		return fail(err)
	}
	if err := b.postInitialRecvs(b.qp); err != nil {
		return fail(err)
	}
	a.laddr, a.raddr = loopAddr{a.qp.Num()}, loopAddr{b.qp.Num()}
	b.laddr, b.raddr = a.raddr, a.laddr
	ad, bd := a.localData(), b.localData()
	if err := a.start(bd); err != nil {
		return fail(err)
	}
	if err := b.start(ad); err != nil {
		a.Close()
		b.free()
		return nil, nil, err
	}
	return a, b, nil
}
