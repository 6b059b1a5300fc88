package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

// transport is the provider's connection manager, registered with package
// cm under the scheme "tcp".
type transport struct{}

func (transport) Name() string        { return "tcp" }
func (transport) DeviceName() string  { return DeviceName }
func (transport) MaxPrivateData() int { return wire.SiwMaxULPPrivate }

func (transport) Listen(addr string, cfg any) (cm.Listener, error) {
	c, _ := cfg.(*Config)
	l, err := Listen(addr, c)
	if err != nil {
		return nil, err
	}
	return listener{l}, nil
}

func (transport) Dial(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	c, _ := p.Config.(*Config)
	conn, err := Dial(ctx, addr, qp, Params{PrivateData: p.PrivateData, IRD: cm.Explicit(p.IRD), ORD: cm.Explicit(p.ORD), Extensions: p.Extensions, Source: p.Source}, c)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// CheckSource implements cm.Sourcer.
func (transport) CheckSource(src string) error {
	_, err := sourceAddr(src)
	return err
}

// sourceAddr parses Params.Source: an IP address literal and a port.
func sourceAddr(src string) (*net.TCPAddr, error) {
	ap, err := netip.ParseAddrPort(src)
	if err != nil {
		return nil, fmt.Errorf("%w: source address %q: %v", verbs.ErrInvalid, src, err)
	}
	return net.TCPAddrFromAddrPort(ap), nil
}

// listener is a Listener as package cm sees it.
type listener struct{ *Listener }

func (l listener) Next(ctx context.Context) (cm.Request, error) {
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return request{r}, nil
}

// request is a Request as package cm sees it.
type request struct{ *Request }

func (r request) Accept(qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	c, err := r.Request.Accept(qp, Params{PrivateData: p.PrivateData, IRD: cm.Explicit(p.IRD), ORD: cm.Explicit(p.ORD)})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// clampIRDORD is a Params depth as the wire carries it: 0 is the most, a
// negative value none.
func clampIRDORD(v int) int {
	switch {
	case v < 0:
		return 0
	case v == 0 || v > maxIRDORD:
		return maxIRDORD
	}
	return v
}

// Conn is an established iWARP connection of one QP.
type Conn struct{ c *conn }

// PrivateData returns the private data of the peer's MPA Request or Reply.
func (x *Conn) PrivateData() []byte { return x.c.pdata }

// IRD returns the negotiated inbound read depth.
func (x *Conn) IRD() int { return x.c.ird }

// ORD returns the negotiated outbound read depth.
func (x *Conn) ORD() int { return x.c.ord }

// CRC reports whether FPDUs carry CRC32C.
func (x *Conn) CRC() bool { return x.c.crc }

// Extensions reports whether the peer speaks the RFC 7306 extensions (a goverbs peer).
func (x *Conn) Extensions() bool { return x.c.ext }

// LocalAddr returns the local TCP address.
func (x *Conn) LocalAddr() net.Addr { return x.c.nc.LocalAddr() }

// RemoteAddr returns the peer's TCP address.
func (x *Conn) RemoteAddr() net.Addr { return x.c.nc.RemoteAddr() }

// Done is closed when the connection has ended and its goroutines are gone.
func (x *Conn) Done() <-chan struct{} { return x.c.done }

// Err says why the connection ended (after Done).
func (x *Conn) Err() error {
	select {
	case <-x.c.dying:
		return x.c.err
	default:
		return nil
	}
}

// Disconnect ends the connection (rdma_disconnect): the TCP connection is
// closed and the QP goes to ERR, flushing its outstanding work; the peer sees
// the connection end and is flushed too.
func (x *Conn) Disconnect() error {
	x.c.fail(ErrLocalDisconnect, nil, nil)
	<-x.c.done
	return nil
}

// Dial connects qp, an RC QP of device iwarp0 in RESET or INIT, to the
// iWARP listener at addr (host:port) with an MPA Request carrying p. A
// rejection returns a *cm.RejectedError with the peer's private data; a
// refused TCP connection is a rejection too (as rdma_cm reports it), whose
// error also wraps syscall.ECONNREFUSED. The wait for the answer ends at
// ctx's deadline, or after Config.ConnectTimeout when ctx has none; either
// way the error wraps cm.ErrUnreachable, and ctx.Err() when ctx ended.
func Dial(ctx context.Context, addr string, qp *verbs.QP, p Params, config *Config) (*Conn, error) {
	ep, err := engine.Claim(qp, dev, verbs.QPTRC)
	if err != nil {
		return nil, err
	}
	cfg := config.resolve()
	if len(p.PrivateData) > wire.SiwMaxULPPrivate {
		return nil, fmt.Errorf("%w: %d bytes of private data (at most %d)", verbs.ErrInvalid, len(p.PrivateData), wire.SiwMaxULPPrivate)
	}
	// The caller's deadline, longer or shorter, replaces ConnectTimeout.
	dctx, cancel, ended := cm.DialLimit(ctx, cfg.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	if p.Source != "" {
		la, err := sourceAddr(p.Source)
		if err != nil {
			return nil, err
		}
		d.LocalAddr = la
	}
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		if e := ended("connecting to "+addr, err); e != nil {
			return nil, e
		}
		if rej := cm.RefusedConnect(err); rej != nil {
			return nil, rej
		}
		return nil, fmt.Errorf("%w: %w", cm.ErrUnreachable, err)
	}
	local := wire.Local{IRD: clampIRDORD(p.IRD), ORD: clampIRDORD(p.ORD), Max: maxIRDORD, CRC: cfg.CRC, Private: p.PrivateData}
	req, err := wire.NewRequest(local)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: %v", verbs.ErrInvalid, err)
	}
	if cfg.Extensions || p.Extensions {
		markExt(&req)
	}
	fail := func(err error) (*Conn, error) {
		nc.Close()
		return nil, err
	}
	if dl, ok := dctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(dctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	frame, _ := wire.AppendMPA(nil, &req)
	if err := writeFrame(nc, ep.Num(), frame); err != nil {
		if e := ended("sending the MPA Request to "+addr, err); e != nil {
			return fail(e)
		}
		return fail(fmt.Errorf("%w: sending the MPA Request: %w", cm.ErrUnreachable, err))
	}
	reply, raw, err := readMPA(nc, true)
	if err != nil {
		if e := ended("no MPA Reply from "+addr, err); e != nil {
			return fail(e)
		}
		if isTimeout(err) {
			return fail(fmt.Errorf("%w: no MPA Reply: %w", cm.ErrUnreachable, err))
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return fail(&cm.RejectedError{Reason: "connection closed before the MPA Reply", Err: err})
		}
		if te := wire.MPATerm(err); te != nil {
			sendTerm(nc, ep.Num(), *te)
		}
		return fail(fmt.Errorf("iwarp: bad MPA Reply: %w", err))
	}
	captureIn(nc, ep.Num(), [][]byte{raw})
	if reply.Reject {
		return fail(&cm.RejectedError{PrivateData: append([]byte(nil), reply.Private...)})
	}
	ext := (cfg.Extensions || p.Extensions) && hasExt(&reply)
	n, err := wire.NegotiateInitiator(req, reply, local)
	if err != nil {
		if te := wire.MPATerm(err); te != nil {
			sendTerm(nc, ep.Num(), *te)
		}
		return fail(fmt.Errorf("iwarp: MPA negotiation: %w", err))
	}
	nc.SetDeadline(time.Time{})
	c := newConn(ep, nc, n, ext, false, append([]byte(nil), reply.Private...), cfg)
	if err := establish(ep, c, n); err != nil {
		return fail(err)
	}
	return &Conn{c}, nil
}

// extOps are the operations only a peer with the RFC 7306 extensions (a
// goverbs peer) executes.
var extOps = []verbs.WROpcode{verbs.WRSendWithImm, verbs.WRRDMAWriteWithImm, verbs.WRAtomicCmpAndSwp,
	verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite}

func establish(ep engine.Endpoint, c *conn, n wire.Negotiated) error {
	p := engine.ConnParams{IRD: uint8(n.IRD), ORD: uint8(n.ORD),
		// rdma_cm's defaults for a connected QP (rdma_init_qp_attr):
		// remote access is governed by the memory regions.
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	if !c.ext {
		p.Deny = extOps
	}
	if err := c.start(); err != nil {
		return err
	}
	if err := ep.Establish(c, p); err != nil {
		c.close(err, nil)
		<-c.done
		return err
	}
	c.estabDone.Store(true)
	close(c.estab)
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sendTerm sends a Terminate on a connection that failed during setup.
func sendTerm(nc net.Conn, qpn uint32, cause wire.TermError) {
	t := wire.TerminateFor(1, cause, nil)
	b, _ := wire.AppendTerminate(nil, &t)
	b = wire.FinishFPDU(b, 0, false)
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	writeFrame(nc, qpn, b)
}

// readMPA reads exactly one MPA frame (so that an FPDU following it stays in
// the socket for the connection's reader).
func readMPA(nc net.Conn, wantReply bool) (wire.MPAFrame, []byte, error) {
	h := make([]byte, wire.MPAHeaderLen, wire.MPAHeaderLen+wire.SiwMaxPrivate)
	if _, err := io.ReadFull(nc, h); err != nil {
		return wire.MPAFrame{}, nil, err
	}
	reply, _, _, pdLen, err := wire.ParseMPAHeader(h)
	if err != nil {
		return wire.MPAFrame{}, h, err
	}
	if reply != wantReply {
		return wire.MPAFrame{}, h, wire.ErrMPAKey
	}
	if pdLen > wire.SiwMaxPrivate {
		return wire.MPAFrame{}, h, wire.ErrMPAPrivateTooLong
	}
	h = h[:wire.MPAHeaderLen+pdLen]
	if _, err := io.ReadFull(nc, h[wire.MPAHeaderLen:]); err != nil {
		return wire.MPAFrame{}, h, err
	}
	f, err := wire.ParseMPA(h)
	return f, h, err
}

// Listener accepts iWARP connection requests.
type Listener struct {
	acc *cm.Acceptor[*Request]
	cfg Config
}

// Listen listens for MPA connection requests on the TCP address addr,
// configured by cfg (nil: the defaults).
func Listen(addr string, cfg *Config) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{cfg: cfg.resolve()}
	l.acc = cm.NewAcceptor(ln, l.handshake, func(r *Request) { r.Reject(nil) })
	return l, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.acc.Addr() }

// Close stops listening; requests not yet taken are refused.
func (l *Listener) Close() error {
	l.acc.Close()
	return nil
}

// handshake reads the MPA Request of a new TCP connection within
// AcceptTimeout; a valid one goes to Next.
func (l *Listener) handshake(nc net.Conn) (*Request, bool) {
	nc.SetReadDeadline(time.Now().Add(l.cfg.AcceptTimeout))
	req, raw, err := readMPA(nc, false)
	if err != nil {
		// A malformed request (markers, a short enhanced block) gets a
		// rejecting Reply where siw sends one; anything else is dropped.
		if errors.Is(err, wire.ErrMPAEnhancedShort) || errors.Is(err, wire.ErrMPAMarkers) {
			if rep, ok := wire.RejectReply(req, nil); ok {
				b, _ := wire.AppendMPA(nil, &rep)
				nc.SetWriteDeadline(time.Now().Add(time.Second))
				captureIn(nc, 0, [][]byte{raw})
				writeFrame(nc, 0, b)
			}
		}
		nc.Close()
		return nil, false
	}
	if req.Markers {
		if rep, ok := wire.RejectReply(req, nil); ok {
			b, _ := wire.AppendMPA(nil, &rep)
			captureIn(nc, 0, [][]byte{raw})
			writeFrame(nc, 0, b)
		}
		nc.Close()
		return nil, false
	}
	nc.SetReadDeadline(time.Time{})
	ext := hasExt(&req)
	return &Request{l: l, nc: nc, req: req, raw: raw, ext: ext, pdata: append([]byte(nil), req.Private...)}, true
}

// Accept waits for the next valid connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) { return l.acc.Next(ctx) }

// Request is an MPA connection request waiting for Accept or Reject.
type Request struct {
	l        *Listener
	nc       net.Conn
	req      wire.MPAFrame
	raw      []byte // the Request as it came, for the capture
	pdata    []byte
	ext      bool
	answered bool
	mu       sync.Mutex
}

// PrivateData returns the requester's private data.
func (r *Request) PrivateData() []byte { return r.pdata }

// IRD returns the requester's IRD (0 for an MPA revision 1 peer).
func (r *Request) IRD() int { return int(r.req.IRD) }

// ORD returns the requester's ORD.
func (r *Request) ORD() int { return int(r.req.ORD) }

// LocalAddr returns the local TCP address.
func (r *Request) LocalAddr() net.Addr { return r.nc.LocalAddr() }

// RemoteAddr returns the requester's TCP address.
func (r *Request) RemoteAddr() net.Addr { return r.nc.RemoteAddr() }

// Extensions reports whether the requester offered the goverbs extensions.
func (r *Request) Extensions() bool { return r.ext }

func (r *Request) answer() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalidState)
	}
	r.answered = true
	return nil
}

// Accept connects qp (an RC QP of iwarp0 in RESET or INIT) to the
// requester with an MPA Reply carrying p. The QP is in RTS when Accept
// returns; it transmits only after the requester's first FPDU, as MPA requires.
func (r *Request) Accept(qp *verbs.QP, p Params) (*Conn, error) {
	ep, err := engine.Claim(qp, dev, verbs.QPTRC)
	if err != nil {
		return nil, err
	}
	if len(p.PrivateData) > wire.SiwMaxPrivate-wire.MPAV2Len {
		return nil, fmt.Errorf("%w: %d bytes of private data", verbs.ErrInvalid, len(p.PrivateData))
	}
	if err := r.answer(); err != nil {
		return nil, err
	}
	cfg := r.l.cfg
	captureIn(r.nc, ep.Num(), [][]byte{r.raw})
	local := wire.Local{IRD: clampIRDORD(p.IRD), ORD: clampIRDORD(p.ORD), Max: maxIRDORD, CRC: cfg.CRC, Private: p.PrivateData}
	reply, n, err := wire.NegotiateResponder(r.req, local)
	ext := r.Extensions()
	if ext && !reply.Reject {
		markExt(&reply)
	}
	b, aerr := wire.AppendMPA(nil, &reply)
	if err != nil || aerr != nil {
		if reply.Reject && aerr == nil {
			r.nc.SetWriteDeadline(time.Now().Add(time.Second))
			writeFrame(r.nc, ep.Num(), b)
		}
		r.nc.Close()
		if err == nil {
			err = aerr
		}
		return nil, fmt.Errorf("iwarp: accept: %w", err)
	}
	r.nc.SetWriteDeadline(time.Now().Add(cfg.ConnectTimeout))
	if err := writeFrame(r.nc, ep.Num(), b); err != nil {
		r.nc.Close()
		return nil, fmt.Errorf("iwarp: sending the MPA Reply: %w", err)
	}
	r.nc.SetWriteDeadline(time.Time{})
	c := newConn(ep, r.nc, n, ext, true, r.pdata, cfg)
	if err := establish(ep, c, n); err != nil {
		return nil, err
	}
	return &Conn{c}, nil
}

// Reject refuses the request with an MPA Reply that has R set and carries
// privateData, then closes the connection.
func (r *Request) Reject(privateData []byte) error {
	if err := r.answer(); err != nil {
		return err
	}
	defer r.nc.Close()
	rep, ok := wire.RejectReply(r.req, privateData)
	if !ok {
		return nil // an MPA revision 0 peer gets no Reply
	}
	b, err := wire.AppendMPA(nil, &rep)
	if err != nil {
		return fmt.Errorf("%w: %v", verbs.ErrInvalid, err)
	}
	r.nc.SetWriteDeadline(time.Now().Add(time.Second))
	captureIn(r.nc, 0, [][]byte{r.raw})
	return writeFrame(r.nc, 0, b)
}

// markExt marks a goverbs frame: both RTR offers (C and D) without the P2P
// bit (A). RFC 6581 gives RTR bits meaning only with A set; siw reads them
// only then and never sends them without it (see the package doc).
func markExt(f *wire.MPAFrame) {
	if f.V2 && !f.P2P {
		f.RTR = wire.RTRWrite | wire.RTRRead
	}
}

// hasExt reports a frame marked by markExt.
func hasExt(f *wire.MPAFrame) bool {
	return f.V2 && !f.P2P && f.RTR == wire.RTRWrite|wire.RTRRead
}
