package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
)

// Socket messages. Setup: hello (active side, with its segment), accept
// (with the passive side's segment) or reject. Then: poke (look at the
// rings), mapReq / mapRep (direct access to a region).
const (
	msgHello  = 1
	msgAccept = 2
	msgReject = 3
	msgPoke   = 4
	msgMapReq = 5
	msgMapRep = 6

	// protoVersion changes with anything both sides must agree on: the
	// segment layout, the ring records (2: records found by their stamp;
	// 3: stamps keyed, records on cache lines).
	protoVersion = 3
	setupHdr     = 28
)

// setup is the body of hello, accept and reject.
type setup struct {
	typ      uint8
	ird, ord uint16
	qpn      uint32
	l        layout
	pdata    []byte
}

func (s *setup) marshal() []byte {
	b := make([]byte, setupHdr+len(s.pdata))
	b[0] = s.typ
	binary.LittleEndian.PutUint16(b[4:], s.ird)
	binary.LittleEndian.PutUint16(b[6:], s.ord)
	binary.LittleEndian.PutUint32(b[8:], s.qpn)
	binary.LittleEndian.PutUint32(b[12:], uint32(s.l.reqSize))
	binary.LittleEndian.PutUint32(b[16:], uint32(s.l.respSize))
	binary.LittleEndian.PutUint32(b[20:], uint32(s.l.slots))
	binary.LittleEndian.PutUint16(b[24:], uint16(len(s.pdata)))
	binary.LittleEndian.PutUint16(b[26:], protoVersion)
	copy(b[setupHdr:], s.pdata)
	return b
}

var errProto = errors.New("shm: malformed connection message")

func (s *setup) unmarshal(b []byte) error {
	if len(b) < setupHdr {
		return errProto
	}
	s.typ = b[0]
	s.ird = binary.LittleEndian.Uint16(b[4:])
	s.ord = binary.LittleEndian.Uint16(b[6:])
	s.qpn = binary.LittleEndian.Uint32(b[8:])
	s.l = layout{reqSize: int(binary.LittleEndian.Uint32(b[12:])), respSize: int(binary.LittleEndian.Uint32(b[16:])), slots: int(binary.LittleEndian.Uint32(b[20:]))}
	n := int(binary.LittleEndian.Uint16(b[24:]))
	if v := binary.LittleEndian.Uint16(b[26:]); v != protoVersion {
		return fmt.Errorf("shm: peer speaks protocol version %d, want %d", v, protoVersion)
	}
	if n > MaxPrivateData || setupHdr+n != len(b) {
		return errProto
	}
	s.pdata = append([]byte(nil), b[setupHdr:]...)
	return nil
}

// readMsg reads one message and the file descriptors passed with it.
func readMsg(uc *net.UnixConn, buf, oob []byte) (msg []byte, fds []int, err error) {
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if oobn > 0 {
		if cms, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range cms {
				if f, ferr := unix.ParseUnixRights(&m); ferr == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if err != nil {
		closeFds(fds)
		return nil, nil, err
	}
	if n == 0 {
		closeFds(fds)
		return nil, nil, errPeerClosed
	}
	return buf[:n], fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

var errPeerClosed = errors.New("shm: peer closed the connection")

// transport is the provider's connection manager, registered with package
// cm under the scheme "unix".
type transport struct{}

func (transport) Name() string        { return "unix" }
func (transport) DeviceName() string  { return DeviceName }
func (transport) MaxPrivateData() int { return MaxPrivateData }

func (transport) Listen(addr string) (cm.Listener, error) { return Listen(addr) }

func (transport) Dial(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	return Dial(ctx, addr, qp, p)
}

func clampDepth(v int) uint16 { return uint16(max(0, min(v, maxIRDORD))) }

// AcceptTimeout bounds the wait for a connection request after a socket
// connection is accepted, and DialTimeout the wait for the answer when the
// Dial context has no deadline.
var (
	AcceptTimeout = 5 * time.Second
	DialTimeout   = 10 * time.Second
)

// Listener accepts connection requests on a Unix socket.
type Listener struct {
	acc *cm.Acceptor[*Request]
}

// Listen listens at addr: a socket path, or "@name" for a name in the
// abstract namespace (no file; Linux).
func Listen(addr string) (*Listener, error) {
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: addr, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen %s: %w", addr, err)
	}
	return &Listener{acc: cm.NewAcceptor(ln, handshake, func(r *Request) { r.Reject(nil) })}, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.acc.Addr() }

// Close stops listening; requests not yet accepted are rejected.
func (l *Listener) Close() error { return l.acc.Close() }

// handshake reads a hello; a malformed one closes the socket.
func handshake(nc net.Conn) (*Request, bool) {
	uc := nc.(*net.UnixConn)
	uc.SetReadDeadline(time.Now().Add(AcceptTimeout))
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4*4))
	msg, fds, err := readMsg(uc, buf, oob)
	var s setup
	if err == nil {
		err = s.unmarshal(msg)
	}
	if err != nil || s.typ != msgHello || len(fds) != 1 {
		closeFds(fds)
		uc.Close()
		return nil, false
	}
	uc.SetReadDeadline(time.Time{})
	return &Request{uc: uc, hello: s, fd: fds[0]}, true
}

// Next waits for the next valid connection request.
func (l *Listener) Next(ctx context.Context) (cm.Request, error) {
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Accept waits for the next valid connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) { return l.acc.Next(ctx) }

// Request is a connection request waiting for Accept or Reject.
type Request struct {
	uc       *net.UnixConn
	hello    setup
	fd       int // the requester's segment
	answered bool
}

// PrivateData returns the requester's private data.
func (r *Request) PrivateData() []byte { return r.hello.pdata }

// IRD returns the requester's responder resources.
func (r *Request) IRD() int { return int(r.hello.ird) }

// ORD returns the requester's initiator depth.
func (r *Request) ORD() int { return int(r.hello.ord) }

// LocalAddr returns the listening socket's address.
func (r *Request) LocalAddr() net.Addr { return r.uc.LocalAddr() }

// RemoteAddr returns the requester's socket address (often unnamed).
func (r *Request) RemoteAddr() net.Addr { return r.uc.RemoteAddr() }

// Accept connects qp (RESET or INIT) to the requester; the QP is in RTS on
// success. The negotiated ORD is at most the requester's IRD.
func (r *Request) Accept(qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	c, err := r.AcceptConn(qp, p)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptConn is Accept returning the concrete connection.
func (r *Request) AcceptConn(qp *verbs.QP, p cm.Params) (*Conn, error) {
	if r.answered {
		return nil, fmt.Errorf("%w: request already answered", verbs.ErrInvalid)
	}
	ep, err := engine.Claim(qp, dev, verbs.QPTRC)
	if err != nil {
		return nil, err
	}
	if len(p.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data, at most %d", verbs.ErrInvalid, len(p.PrivateData), MaxPrivateData)
	}
	r.answered = true
	peer, err := mapSegment(r.fd, r.hello.l)
	unix.Close(r.fd)
	if err != nil {
		r.uc.Close()
		return nil, err
	}
	mine, fd, err := newSegment(r.hello.l)
	if err != nil {
		peer.Unmap()
		r.uc.Close()
		return nil, err
	}
	ird, ord := clampDepth(p.IRD), min(clampDepth(p.ORD), r.hello.ird)
	acc := setup{typ: msgAccept, ird: ird, ord: ord, qpn: ep.Num(), l: r.hello.l, pdata: p.PrivateData}
	_, _, err = r.uc.WriteMsgUnix(acc.marshal(), unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		mine.Unmap()
		peer.Unmap()
		r.uc.Close()
		return nil, fmt.Errorf("shm: accept: %w", err)
	}
	c := newConn(ep, r.uc, mine, peer, r.hello.qpn, r.hello.pdata, int(ird), int(ord), p.RNRRetry)
	if err := c.start(); err != nil {
		return nil, err
	}
	return &Conn{c: c}, nil
}

// Reject refuses the request, sending private data to the requester.
func (r *Request) Reject(privateData []byte) error {
	if r.answered {
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalid)
	}
	if len(privateData) > MaxPrivateData {
		return fmt.Errorf("%w: %d bytes of private data, at most %d", verbs.ErrInvalid, len(privateData), MaxPrivateData)
	}
	r.answered = true
	unix.Close(r.fd)
	rej := setup{typ: msgReject, l: r.hello.l, pdata: privateData}
	r.uc.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := r.uc.Write(rej.marshal())
	r.uc.Close()
	return err
}

// Dial connects qp (RESET or INIT) to the listener at addr (a path, or
// "@name"); the QP is in RTS on success. A rejection returns a
// *cm.RejectedError with the peer's private data.
func Dial(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (*Conn, error) {
	ep, err := engine.Claim(qp, dev, verbs.QPTRC)
	if err != nil {
		return nil, err
	}
	if len(p.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data, at most %d", verbs.ErrInvalid, len(p.PrivateData), MaxPrivateData)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", addr)
	if err != nil {
		// Nobody listening is a rejection, as a TCP reset is for iWARP.
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, &cm.RejectedError{Reason: err.Error()}
		}
		return nil, fmt.Errorf("%w: %s: %v", cm.ErrUnreachable, addr, err)
	}
	uc := nc.(*net.UnixConn)
	mine, fd, err := newSegment(defaultLayout)
	if err != nil {
		uc.Close()
		return nil, err
	}
	fail := func(err error) (*Conn, error) {
		mine.Unmap()
		uc.Close()
		return nil, err
	}
	hello := setup{typ: msgHello, ird: clampDepth(p.IRD), ord: clampDepth(p.ORD), qpn: ep.Num(), l: defaultLayout, pdata: p.PrivateData}
	_, _, err = uc.WriteMsgUnix(hello.marshal(), unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %v", cm.ErrUnreachable, addr, err))
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(DialTimeout)
	}
	uc.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { uc.SetReadDeadline(time.Unix(1, 0)) })
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4*4))
	msg, fds, err := readMsg(uc, buf, oob)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(fmt.Errorf("%w: %s: no answer: %v", cm.ErrUnreachable, addr, err))
	}
	var rep setup
	if err := rep.unmarshal(msg); err != nil {
		closeFds(fds)
		return fail(err)
	}
	switch {
	case rep.typ == msgReject:
		closeFds(fds)
		return fail(&cm.RejectedError{PrivateData: rep.pdata})
	case rep.typ != msgAccept || len(fds) != 1 || rep.l != defaultLayout:
		closeFds(fds)
		return fail(errProto)
	}
	peer, err := mapSegment(fds[0], rep.l)
	unix.Close(fds[0])
	if err != nil {
		return fail(err)
	}
	uc.SetReadDeadline(time.Time{})
	// Our ORD is bounded by the peer's IRD, its ORD by ours.
	c := newConn(ep, uc, mine, peer, rep.qpn, rep.pdata, int(hello.ird), int(min(hello.ord, rep.ird)), p.RNRRetry)
	if err := c.start(); err != nil {
		return nil, err
	}
	return &Conn{c: c}, nil
}

// Conn is an established shared-memory connection of one QP.
type Conn struct{ c *conn }

// PrivateData returns the private data of the peer's request or reply.
func (x *Conn) PrivateData() []byte { return x.c.pdata }

// IRD returns the negotiated inbound read depth.
func (x *Conn) IRD() int { return x.c.ird }

// ORD returns the negotiated outbound read depth.
func (x *Conn) ORD() int { return x.c.ord }

// LocalAddr returns the local socket address.
func (x *Conn) LocalAddr() net.Addr { return x.c.uc.LocalAddr() }

// RemoteAddr returns the peer's socket address.
func (x *Conn) RemoteAddr() net.Addr { return x.c.uc.RemoteAddr() }

// Done is closed when the connection has ended and its resources are released.
func (x *Conn) Done() <-chan struct{} { return x.c.done }

// Err says why the connection ended, once Done is closed.
func (x *Conn) Err() error {
	select {
	case <-x.c.done:
		return x.c.err
	default:
		return nil
	}
}

// Disconnect ends the connection: both QPs move to ERR and flush.
func (x *Conn) Disconnect() error {
	x.c.close(ErrLocalDisconnect)
	x.c.ep.Fail()
	return nil
}

// Errors a connection ends with.
var (
	ErrLocalDisconnect = errors.New("shm: disconnected locally")
	ErrPeerDisconnect  = errors.New("shm: peer disconnected")
)
