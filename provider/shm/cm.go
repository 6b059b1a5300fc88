package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/defaults"
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
	// 3: stamps keyed, records on cache lines; 4: the direct window, which
	// revocation waits for).
	protoVersion = 4
	setupHdr     = 28

	// whyCredentials: a reject by the listener itself, whose AllowPeer
	// refused the dialer's credentials.
	whyCredentials = 1
)

// setup is the body of hello, accept and reject.
type setup struct {
	typ      uint8
	why      uint8 // reject: why (whyCredentials), 0 for the application's
	ird, ord uint16
	qpn      uint32
	l        layout
	pdata    []byte
}

func (s *setup) marshal() []byte {
	b := make([]byte, setupHdr+len(s.pdata))
	b[0] = s.typ
	b[1] = s.why
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
	s.why = b[1]
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
	return received(buf, oob, n, oobn, err)
}

// received is what a read of n bytes and oobn of control data into buf
// and oob that ended with err brought: the message and the descriptors
// it passed, or the read's error (errPeerClosed at the socket's end; the
// descriptors are closed then).
func received(buf, oob []byte, n, oobn int, err error) (msg []byte, fds []int, _ error) {
	if oobn > 0 {
		fds = parseFds(oob[:oobn])
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

// parseFds returns the descriptors that control data passes.
func parseFds(oob []byte) (fds []int) {
	if cms, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range cms {
			if f, ferr := unix.ParseUnixRights(&m); ferr == nil {
				fds = append(fds, f...)
			}
		}
	}
	return fds
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
	conn, err := Dial(ctx, addr, qp, Params{PrivateData: p.PrivateData, IRD: cm.Explicit(p.IRD), ORD: cm.Explicit(p.ORD), RNRRetry: cm.Explicit(int(p.RNRRetry))}, c)
	if err != nil {
		return nil, err
	}
	return conn, nil
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
	c, err := r.Request.Accept(qp, Params{PrivateData: p.PrivateData, IRD: cm.Explicit(p.IRD), ORD: cm.Explicit(p.ORD), RNRRetry: cm.Explicit(int(p.RNRRetry))})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// clampDepth is a Params depth as the wire carries it: 0 is the most, a
// negative value none.
func clampDepth(v int) uint16 {
	if v == 0 {
		return maxIRDORD
	}
	return uint16(max(0, min(v, maxIRDORD)))
}

// rnrRetry is a Params rnr_retry: 0 is 7 (for ever), a negative value none.
func rnrRetry(v int) uint8 { return uint8(min(defaults.Int(v, 7), 7)) }

// Listener accepts connection requests on a Unix socket.
type Listener struct {
	acc  *cm.Acceptor[*Request]
	cfg  Config
	path string      // the socket file, for a path address
	ino  os.FileInfo // the socket file as created, to remove only ours
	addr net.Addr    // the address dialers use
}

// Listen listens at addr: a socket path, or "@name" for a name in the
// abstract namespace (no file; Linux), configured by cfg (nil: the
// defaults). Only processes that cfg.AllowPeer allows may connect (by
// default, those of this process's user). A path socket is created with
// cfg.SocketMode (0600 by default) before anyone can reach it; a socket
// file that a server which died left behind (nothing answers on it) is
// replaced, while one that a live server listens on gives EADDRINUSE.
func Listen(addr string, cfg *Config) (*Listener, error) {
	l := &Listener{cfg: cfg.resolve()}
	var ln *net.UnixListener
	var err error
	if addr == "" || addr[0] == '@' {
		ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: addr, Net: "unixpacket"})
	} else {
		ln, l.ino, err = listenPath(addr, l.cfg.SocketMode)
		l.path = addr
	}
	if err != nil {
		return nil, fmt.Errorf("shm: listen %s: %w", addr, err)
	}
	// Set before the acceptor starts: its handshakes read it.
	l.addr = ln.Addr()
	if l.path != "" {
		l.addr = &net.UnixAddr{Name: l.path, Net: "unixpacket"}
	}
	l.acc = cm.NewAcceptor(ln, l.handshake, func(r *Request) { r.Reject(nil) })
	return l, nil
}

// listenPath creates a listening socket at path with the given mode: it is
// bound inside a fresh private directory next to path, given its mode, and
// renamed into place, so that nobody can connect to it with other
// permissions meanwhile. The rename replaces a stale socket (one nothing
// answers on); a live one, or a file that is not a socket, is left alone.
func listenPath(path string, mode os.FileMode) (*net.UnixListener, os.FileInfo, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, nil, fmt.Errorf("%w: %s exists and is not a socket", syscall.EADDRINUSE, path)
		}
		c, err := net.DialTimeout("unixpacket", path, time.Second)
		if err == nil {
			c.Close()
			return nil, nil, fmt.Errorf("%w: a server listens on %s", syscall.EADDRINUSE, path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("%w: %s: %v", syscall.EADDRINUSE, path, err)
		}
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".goverbs-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false) // the listener removes the file at path itself
	fi, err := func() (os.FileInfo, error) {
		if err := os.Chmod(tmp, mode); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, err
		}
		return os.Lstat(path)
	}()
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, fi, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.addr }

// Close stops listening; requests not yet accepted are rejected. A socket
// file is removed if it is still the one Listen created.
func (l *Listener) Close() error {
	err := l.acc.Close()
	if l.path != "" {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.ino) {
			os.Remove(l.path)
		}
	}
	return err
}

// peerCred returns the credentials of the process at the other end of uc.
func peerCred(uc *net.UnixConn) (PeerCred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return PeerCred{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, err
	}
	if cerr != nil {
		return PeerCred{}, cerr
	}
	return PeerCred{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}

// handshake reads the peer's hello and checks its credentials: a peer
// that is not allowed is rejected (the segment it passed is closed
// unmapped), a malformed hello closes the socket.
func (l *Listener) handshake(nc net.Conn) (*Request, bool) {
	uc := nc.(*net.UnixConn)
	cred, cerr := peerCred(uc)
	uc.SetReadDeadline(time.Now().Add(l.cfg.AcceptTimeout))
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4*4))
	// The hello is read even from a peer that is refused: a socket closed
	// with unread data resets the connection, and the peer would see that
	// instead of the rejection.
	msg, fds, err := readMsg(uc, buf, oob)
	if cerr != nil || !l.cfg.AllowPeer(cred) {
		closeFds(fds)
		rej := setup{typ: msgReject, why: whyCredentials, l: defaultLayout}
		uc.SetWriteDeadline(time.Now().Add(time.Second))
		uc.Write(rej.marshal())
		uc.Close()
		return nil, false
	}
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
	return &Request{uc: uc, hello: s, fd: fds[0], cred: cred, cfg: &l.cfg, local: l.Addr()}, true
}

// Accept waits for the next valid connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) { return l.acc.Next(ctx) }

// Request is a connection request waiting for Accept or Reject.
type Request struct {
	uc       *net.UnixConn
	hello    setup
	fd       int // the requester's segment
	cred     PeerCred
	cfg      *Config
	answered bool
	local    net.Addr // the listener's address
}

// PrivateData returns the requester's private data.
func (r *Request) PrivateData() []byte { return r.hello.pdata }

// IRD returns the requester's responder resources.
func (r *Request) IRD() int { return int(r.hello.ird) }

// ORD returns the requester's initiator depth.
func (r *Request) ORD() int { return int(r.hello.ord) }

// PeerCred returns the credentials of the requesting process.
func (r *Request) PeerCred() PeerCred { return r.cred }

// LocalAddr returns the listening socket's address.
func (r *Request) LocalAddr() net.Addr { return r.local }

// RemoteAddr returns the requester's socket address (often unnamed).
func (r *Request) RemoteAddr() net.Addr { return r.uc.RemoteAddr() }

// Accept connects qp (RESET or INIT) to the requester; the QP is in RTS on
// success. The negotiated ORD is at most the requester's IRD.
func (r *Request) Accept(qp *verbs.QP, p Params) (*Conn, error) {
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
	if h := testHookAccepted.Load(); h != nil {
		(*h)()
	}
	c := newConn(ep, r.uc, mine, peer, r.hello.qpn, r.hello.pdata, int(ird), int(ord), rnrRetry(p.RNRRetry), r.cfg)
	if err := c.start(); err != nil {
		return nil, err
	}
	return &Conn{c: c, local: r.local}, nil
}

// testHookAccepted, when a test sets it, runs after the accept is sent,
// before the connection starts.
var testHookAccepted atomic.Pointer[func()]

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
// *cm.RejectedError with the peer's private data; nobody listening at addr
// is a rejection too, whose error wraps syscall.ECONNREFUSED, and a
// listener that does not admit this process one that wraps syscall.EACCES.
// The wait for the answer ends at ctx's deadline, or after
// Config.DialTimeout when ctx has none; either way the error wraps
// cm.ErrUnreachable, and ctx.Err() when ctx ended.
func Dial(ctx context.Context, addr string, qp *verbs.QP, p Params, config *Config) (*Conn, error) {
	cfg := config.resolve()
	ep, err := engine.Claim(qp, dev, verbs.QPTRC)
	if err != nil {
		return nil, err
	}
	if len(p.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data, at most %d", verbs.ErrInvalid, len(p.PrivateData), MaxPrivateData)
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: empty address (a path or @name)", verbs.ErrInvalid)
	}
	// The caller's deadline, longer or shorter, replaces DialTimeout.
	dctx, cancel, ended := cm.DialLimit(ctx, cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "unixpacket", addr)
	if err != nil {
		if e := ended("connecting to "+addr, err); e != nil {
			return nil, e
		}
		// Nobody listening is a rejection, as a TCP reset is for iWARP.
		if rej := cm.RefusedConnect(err); rej != nil {
			return nil, rej
		}
		return nil, fmt.Errorf("%w: %s: %w", cm.ErrUnreachable, addr, err)
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
		return fail(fmt.Errorf("%w: %s: %w", cm.ErrUnreachable, addr, err))
	}
	if dl, ok := dctx.Deadline(); ok {
		uc.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(dctx, func() { uc.SetReadDeadline(time.Unix(1, 0)) })
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4*4))
	msg, fds, err := readMsg(uc, buf, oob)
	stop()
	if err != nil {
		if e := ended("no answer from "+addr, err); e != nil {
			return fail(e)
		}
		return fail(fmt.Errorf("%w: %s: no answer: %w", cm.ErrUnreachable, addr, err))
	}
	var rep setup
	if err := rep.unmarshal(msg); err != nil {
		closeFds(fds)
		return fail(err)
	}
	switch {
	case rep.typ == msgReject:
		closeFds(fds)
		if rep.why == whyCredentials {
			return fail(&cm.RejectedError{Reason: "the listener does not allow this process (its user id)", Err: syscall.EACCES})
		}
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
	c := newConn(ep, uc, mine, peer, rep.qpn, rep.pdata, int(hello.ird), int(min(hello.ord, rep.ird)), rnrRetry(p.RNRRetry), &cfg)
	if err := c.start(); err != nil {
		return nil, err
	}
	return &Conn{c: c, remote: &net.UnixAddr{Name: addr, Net: "unixpacket"}}, nil
}

// Conn is an established shared-memory connection of one QP.
type Conn struct {
	c *conn
	// The listener's address, at either end: the socket's own name is
	// the one it was bound to, which for a path is a temporary one (see
	// Listen).
	local, remote net.Addr
}

// PrivateData returns the private data of the peer's request or reply.
func (x *Conn) PrivateData() []byte { return x.c.pdata }

// IRD returns the negotiated inbound read depth.
func (x *Conn) IRD() int { return x.c.ird }

// ORD returns the negotiated outbound read depth.
func (x *Conn) ORD() int { return x.c.ord }

// LocalAddr returns the local socket address.
func (x *Conn) LocalAddr() net.Addr {
	if x.local != nil {
		return x.local
	}
	return x.c.laddr
}

// RemoteAddr returns the peer's socket address.
func (x *Conn) RemoteAddr() net.Addr {
	if x.remote != nil {
		return x.remote
	}
	return x.c.raddr
}

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
	ErrLocalDisconnect = fmt.Errorf("shm: %w", cm.ErrLocalDisconnect)
	ErrDisconnected    = fmt.Errorf("shm: %w", cm.ErrPeerDisconnect)
)
