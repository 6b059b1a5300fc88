// Package rdmacm is the librdmacm layer of goverbs: connection identifiers
// that listen, connect, accept and reject with private data, connection
// events, disconnect, and the helpers of rdma_verbs.h (PostRecv, PostSendv,
// GetRecvComp, ...), over any provider that makes connections.
//
// # Addresses
//
// An address names its transport by its scheme:
//
//	host:port, tcp://host:port  iWARP over TCP (provider iwarp; interoperates
//	                            with Linux siw and librdmacm programs)
//	roce://host:port            RoCEv2 over UDP (provider roce; the IB CM;
//	                            interoperates with Linux rxe and RoCE NICs)
//	unix:/path                  shared memory between processes of one host
//	unix:@name                  (provider shm), over a Unix socket at a path
//	                            or an abstract name
//	rdma://host:port            the kernel's rdma_cm (librdmacm) on a real
//	                            RDMA device (provider rdmacore: a build with
//	                            the tag rdmacore only)
//
// Real RDMA devices: in a program built with the tag rdmacore, an address
// without a scheme goes to the kernel's CM when an RDMA device serves it
// (the local address to listen on, or the route to the peer, is on an RDMA
// device's interface: rxe0, siw0, mlx5_0, ...), and to goverbs' iWARP over
// TCP otherwise. GOVERBS_CM=kernel sends every address without a scheme to
// the kernel's CM, GOVERBS_CM=goverbs none; "tcp://" always means goverbs'
// iWARP and "rdma://" the kernel's CM. Without the tag nothing changes.
//
// The address LocalAddr and RemoteAddr return prints in the same form (an
// *Addr carries the scheme of unix: and roce:// addresses), so that a
// listener's LocalAddr().String() is what a client dials.
//
// A RoCE connection leaves from the device of the local address the route
// chooses, or of the one given to CreateIDFrom or DialFrom; a listener is
// on its own address's device.
//
// Identifiers are in rdma_cm's TCP port space (reliable connections)
// unless NewID puts them in the UDP one (UD QPs that resolve their peer's
// QP; over roce://).
//
// Private data arrives as the transport carries it: exactly over iWARP and
// shared memory; over RoCE, padded with zeros to the size of the IB CM
// message's field (56 bytes in a connection request after rdma_cm's
// header, 196 in a reply, 148 in a rejection), because the IB CM puts no
// length on the wire; librdmacm delivers it the same way.
//
// The Go-style entry points are Dial (rdma_create_ep + rdma_connect) and
// Listen + GetRequest + Accept; CreateEP gives rdma_create_ep's model for
// code ported from C. Every blocking call takes a context.
//
// Each identifier has its own event queue (NextEvent) unless it is
// attached to an EventChannel (NewEventChannel, ID.Migrate): one queue,
// and one descriptor for epoll, for many identifiers, as
// rdma_create_event_channel gives. Multicast (rdma_join_multicast) is not
// there yet.
//
// # Errors
//
// Errors are tested with errors.Is and errors.As, as those of package net:
//
//   - a connection the peer refuses is a *RejectedError (errors.Is
//     ErrRejected); so is one nobody listens for, as librdmacm reports
//     it, which also wraps syscall.ECONNREFUSED, and one the listener's
//     permissions refuse (a unix: listener's peer check), which wraps
//     syscall.EACCES;
//   - a peer that does not answer gives an error wrapping ErrUnreachable.
//     Connect (and Dial) wait for the answer until the context's
//     deadline; without a deadline they give up after 10 seconds
//     (errors.Is syscall.ETIMEDOUT). A deadline, shorter or longer than
//     that, is the one that counts. When the context ends, the error also
//     wraps its error (context.DeadlineExceeded, context.Canceled);
//   - a bad address or argument wraps verbs.ErrInvalid, an unknown scheme
//     verbs.ErrNotSupported;
//   - every method of a closed identifier (but Close, which may be called
//     again, and the accessors) returns ErrClosed, and so do calls blocked
//     in it (GetRequest, NextEvent, GetRecvComp, GetSendComp) when it is
//     closed.
package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/goverbs/goverbs/internal/cm"
	_ "github.com/goverbs/goverbs/provider/iwarp"    // the "tcp" transport
	_ "github.com/goverbs/goverbs/provider/rdmacore" // the "rdma" transport, in a build with its tag
	_ "github.com/goverbs/goverbs/provider/roce"     // the "roce" transport
	_ "github.com/goverbs/goverbs/provider/shm"      // the "unix" transport
	"github.com/goverbs/goverbs/verbs"
)

// Errors of connection setup. Dial and Connect return a *RejectedError
// (errors.Is(err, ErrRejected)) when the peer rejects, and an error wrapping
// ErrUnreachable when it does not answer.
var (
	ErrRejected    = cm.ErrRejected
	ErrUnreachable = cm.ErrUnreachable
	// ErrClosed is what the methods of a closed identifier return.
	ErrClosed = errors.New("rdmacm: identifier closed")

	// An EventDisconnected's Err wraps ErrDisconnected when the peer ended
	// the connection and ErrLocalDisconnect when this side did (Disconnect,
	// Close); any other error means the connection was lost.
	ErrDisconnected    = cm.ErrPeerDisconnect
	ErrLocalDisconnect = cm.ErrLocalDisconnect
)

// RejectedError is the error of a connection that was refused. Its
// fields:
//
//	PrivateData []byte // what the peer sent with its rejection (rdma_reject); nil when the system refused
//	Reason      string // why, when the transport knows more than "rejected by the peer"
//	Err         error  // the cause when the system refused: syscall.ECONNREFUSED (nobody
//	                   // listens at the address), syscall.EACCES (the listener does not
//	                   // admit this process); nil when the peer rejected by its own choice
//
// errors.Is(err, ErrRejected) holds for every rejection, and errors.Is(err,
// syscall.ECONNREFUSED) (or EACCES) when Err is that errno. EventRejected
// carries the same error and private data.
type RejectedError = cm.RejectedError

// AcceptError is GetRequest's report that the listener failed to accept a
// connection (out of descriptors: errors.Is(err, syscall.EMFILE); out of
// memory or buffers; a connection aborted before it was accepted). The
// listener goes on listening, and GetRequest may be called again; out of
// descriptors, the waiting connection was refused at once (Shed), so its
// dialer fails now rather than at its timeout. Like a net.Error, it says
// Temporary.
type AcceptError = cm.AcceptError

// ConnParam are the connection parameters (struct rdma_conn_param).
type ConnParam struct {
	PrivateData []byte
	// ResponderResources is the number of RDMA reads/atomics this side accepts
	// outstanding (IRD); InitiatorDepth the number it issues (ORD). 0xFF (or
	// a nil *ConnParam) means the device maximum, as in librdmacm.
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // retry_cnt of the QP over RoCE (0 means 7); iWARP (TCP) and shm have no retries
	RNRRetryCount      uint8 // rnr_retry of the QP (7: retry for ever); a nil *ConnParam means 7
	// Extensions (Connect only) offers the provider's extensions: over
	// iWARP, RFC 7306 immediate data and atomics, which only goverbs peers
	// speak. Leave it off towards other peers (see package iwarp).
	Extensions bool
}

// MaxDepth is RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH: the device maximum.
const MaxDepth = 0xFF

// transportFor parses an address and finds its transport.
func transportFor(addr string) (cm.Transport, string, error) {
	scheme, rest := "tcp", addr
	if i := strings.Index(addr, "://"); i > 0 {
		scheme, rest = addr[:i], addr[i+3:]
	} else if strings.HasPrefix(addr, "unix:") {
		scheme, rest = "unix", strings.TrimPrefix(addr, "unix:")
	} else if k, ok := cm.Lookup("rdma"); ok {
		// The kernel's CM (see the package doc): forced, or when it claims addr.
		switch os.Getenv("GOVERBS_CM") {
		case "kernel":
			scheme = "rdma"
		case "goverbs":
		default:
			if c, ok := k.(cm.Claimer); ok && c.Claims(rest) {
				scheme = "rdma"
			}
		}
	}
	t, ok := cm.Lookup(scheme)
	if !ok {
		return nil, "", fmt.Errorf("%w: no transport for %q in address %q (the schemes are host:port, tcp://host:port, roce://host:port, unix:/path and unix:@name)", verbs.ErrNotSupported, scheme, addr)
	}
	if rest == "" {
		return nil, "", fmt.Errorf("%w: address %q is empty", verbs.ErrInvalid, addr)
	}
	if scheme == "tcp" && (rest[0] == '@' || rest[0] == '/') {
		// A unix socket's own spelling, without the scheme that says so.
		return nil, "", fmt.Errorf("%w: address %q: a shared-memory address is unix:%s", verbs.ErrInvalid, addr, rest)
	}
	return t, rest, nil
}

// Addr is the address of an identifier over a transport whose addresses
// are dialed with their scheme (shared memory, RoCE): its String is the
// form Dial and Listen accept, "unix:@name", "unix:/path" or
// "roce://host:port". Over TCP, LocalAddr and RemoteAddr return the
// *net.TCPAddr itself, whose String Dial accepts as it is.
type Addr struct {
	// Scheme is the transport's: "unix" or "roce".
	Scheme string
	// Addr is the transport's own address: a *net.UnixAddr (an unnamed
	// socket, a dialer's end, has an empty Name), or a *net.UDPAddr whose
	// port is rdma_cm's port.
	Addr net.Addr
}

// Network returns the scheme.
func (a *Addr) Network() string { return a.Scheme }

// String returns the address as Dial takes it; "" for an unnamed socket.
func (a *Addr) String() string {
	s := a.Addr.String()
	switch {
	case s == "":
		return ""
	case a.Scheme == "unix":
		return "unix:" + s
	}
	return a.Scheme + "://" + s
}

// addrOf gives a transport's address the form Dial takes.
func (id *ID) addrOf(a net.Addr) net.Addr {
	if a == nil || id.tr.Name() == "tcp" {
		return a
	}
	return &Addr{Scheme: id.tr.Name(), Addr: a}
}

// devices caches one context and one default PD per device, as librdmacm does.
var devices struct {
	sync.Mutex
	ctx map[string]*verbs.Context
	pd  map[string]*verbs.PD
}

func deviceContext(name string) (*verbs.Context, *verbs.PD, error) {
	devices.Lock()
	defer devices.Unlock()
	if c, ok := devices.ctx[name]; ok {
		return c, devices.pd[name], nil
	}
	c, err := verbs.OpenDevice(name)
	if err != nil {
		return nil, nil, err
	}
	pd, err := c.AllocPD()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if devices.ctx == nil {
		devices.ctx, devices.pd = map[string]*verbs.Context{}, map[string]*verbs.PD{}
	}
	devices.ctx[name], devices.pd[name] = c, pd
	return c, pd, nil
}

// DeviceContext returns the verbs context rdmacm uses for the device that
// serves addr, and its default protection domain, so that memory can be
// registered before an identifier exists.
func DeviceContext(addr string) (*verbs.Context, *verbs.PD, error) {
	t, rest, err := transportFor(addr)
	if err != nil {
		return nil, nil, err
	}
	name, err := deviceName(t, rest)
	if err != nil {
		return nil, nil, err
	}
	return deviceContext(name)
}

// deviceName is the device that serves addr: the transport's, or, for a
// transport whose device depends on the address (RoCE), the one of the
// local address the peer is reached from (rdma_resolve_addr's choice).
func deviceName(t cm.Transport, addr string) (string, error) {
	if r, ok := t.(cm.Router); ok {
		return r.DeviceFor(addr, false)
	}
	return t.DeviceName(), nil
}

func params(p *ConnParam, maxPD int) (cm.Params, error) {
	if p == nil {
		return cm.Params{IRD: 128, ORD: 128, RNRRetry: 7}, nil
	}
	if len(p.PrivateData) > maxPD {
		return cm.Params{}, fmt.Errorf("%w: %d bytes of private data (the transport carries %d)", verbs.ErrInvalid, len(p.PrivateData), maxPD)
	}
	cp := cm.Params{PrivateData: p.PrivateData, IRD: int(p.ResponderResources), ORD: int(p.InitiatorDepth), Extensions: p.Extensions,
		RNRRetry: min(p.RNRRetryCount, 7), RetryCount: min(p.RetryCount, 7)}
	if p.ResponderResources == MaxDepth {
		cp.IRD = 128
	}
	if p.InitiatorDepth == MaxDepth {
		cp.ORD = 128
	}
	return cp, nil
}

// idState is where an identifier is in its life.
type idState int

const (
	stateIdle idState = iota
	stateListening
	stateRequest // a connection request not answered yet
	stateConnected
	stateDisconnected
	stateClosed
)

// ID is a communication identifier (struct rdma_cm_id): one end of a
// connection, or a listener.
type ID struct {
	tr   cm.Transport
	addr string // the address to connect to or listen on

	// Verbs objects; those the ID created itself are destroyed with it.
	// mu guards them: read them through the methods of the same names.
	vctx   *verbs.Context
	pd     *verbs.PD
	qp     *verbs.QP
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	sendCh *verbs.CompChannel
	recvCh *verbs.CompChannel
	ownCQs bool
	qpAttr *verbs.QPInitAttr // for requests of a listener created by CreateEP

	mu       sync.Mutex
	state    idState
	conn     cm.Conn
	req      cm.Request
	ln       cm.Listener
	events   chan Event
	done     chan struct{}
	wg       sync.WaitGroup
	peerPD   []byte
	peerIRD  int
	peerORD  int
	listenID *ID

	userData any

	pcfg any       // SetProviderConfig's
	ps   PortSpace // NewID's
	ud   *UDParam  // a UD identifier's resolved peer

	src      string             // CreateIDFrom's source, for a cm.Sourcer
	ch       *EventChannel      // Migrate's: where events go (nil: events)
	pumpStop context.CancelFunc // ends a listener's pump to ch
}

// Context returns the device context the identifier is bound to (the
// verbs field of rdma_cm_id). It changes only when a connect or listen picks
// another device before a QP exists.
func (id *ID) Context() *verbs.Context {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.vctx
}

// PD returns the identifier's protection domain: the one its QP was created
// in, else the device's default PD.
func (id *ID) PD() *verbs.PD {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.pd
}

// QP returns the identifier's QP, nil before CreateQP and after DestroyQP.
func (id *ID) QP() *verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

// SendCQ returns the QP's send CQ, nil without a QP.
func (id *ID) SendCQ() *verbs.CQ {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.sendCQ
}

// RecvCQ returns the QP's receive CQ, nil without a QP.
func (id *ID) RecvCQ() *verbs.CQ {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.recvCQ
}

// SendCh returns the completion channel of the send CQ (the one
// GetSendComp waits on), nil when the CQ has none.
func (id *ID) SendCh() *verbs.CompChannel {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.sendCh
}

// RecvCh returns the completion channel of the receive CQ (the one
// GetRecvComp waits on), nil when the CQ has none.
func (id *ID) RecvCh() *verbs.CompChannel {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.recvCh
}

// UserData returns the value SetUserData stored (the context pointer of
// rdma_cm_id).
func (id *ID) UserData() any {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.userData
}

// SetUserData stores a value of the application's with the identifier.
func (id *ID) SetUserData(v any) {
	id.mu.Lock()
	id.userData = v
	id.mu.Unlock()
}

// SetProviderConfig gives the identifier's provider a configuration of its
// own, for the Listen or Connect that follows (as rdma_set_option sets a
// provider's options): a *iwarp.Config for a TCP address, a *shm.Config
// for a unix: address; a configuration of another provider is ignored,
// and nil means the provider's defaults. Requests a listener yields are
// accepted with the listener's.
func (id *ID) SetProviderConfig(cfg any) {
	id.mu.Lock()
	id.pcfg = cfg
	id.mu.Unlock()
}

func (id *ID) providerConfig() any {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.pcfg
}

func newID(t cm.Transport, addr string) (*ID, error) {
	name, err := deviceName(t, addr)
	if err != nil {
		return nil, err
	}
	return newIDOn(t, addr, name)
}

// newIDOn makes an identifier for addr on the device name.
func newIDOn(t cm.Transport, addr, name string) (*ID, error) {
	ctx, pd, err := deviceContext(name)
	if err != nil {
		return nil, err
	}
	return &ID{tr: t, addr: addr, vctx: ctx, pd: pd, events: make(chan Event, 64), done: make(chan struct{})}, nil
}

// CreateID creates an identifier for addr (rdma_create_id + rdma_resolve_addr
// + rdma_resolve_route: with TCP-based transports resolution is immediate).
func CreateID(addr string) (*ID, error) {
	t, rest, err := transportFor(addr)
	if err != nil {
		return nil, err
	}
	return newID(t, rest)
}

// CreateIDFrom is CreateID with a source address (rdma_resolve_addr with
// src_addr): the connection goes out from the local address src (an IP
// address, with or without a port). Over roce:// that chooses the device
// (the one that serves src); over TCP (iWARP) it is the TCP connection's
// local address, and a source that is not an IP address is ErrInvalid.
// Transports without addresses of that kind (unix:) refuse a source
// (ErrNotSupported).
func CreateIDFrom(src, addr string) (*ID, error) {
	t, rest, err := transportFor(addr)
	if err != nil {
		return nil, err
	}
	if src == "" {
		return newID(t, rest)
	}
	if _, _, err := net.SplitHostPort(src); err != nil {
		src = net.JoinHostPort(src, "0")
	}
	switch r := t.(type) {
	case cm.Router:
		name, err := r.DeviceFor(src, true)
		if err != nil {
			return nil, err
		}
		return newIDOn(t, rest, name)
	case cm.Sourcer:
		if err := r.CheckSource(src); err != nil {
			return nil, err
		}
		id, err := newID(t, rest)
		if err != nil {
			return nil, err
		}
		id.src = src
		return id, nil
	}
	return nil, fmt.Errorf("%w: a source address over %s", verbs.ErrNotSupported, t.Name())
}

// LocalAddr returns the local address of a connected or listening
// identifier, nil before it is either. Its String is an address Dial
// accepts: a listener's is the one to dial (a *net.TCPAddr, or an *Addr
// with its scheme).
func (id *ID) LocalAddr() net.Addr {
	id.mu.Lock()
	defer id.mu.Unlock()
	switch {
	case id.conn != nil:
		return id.addrOf(id.conn.LocalAddr())
	case id.req != nil:
		return id.addrOf(id.req.LocalAddr())
	case id.ln != nil:
		return id.addrOf(id.ln.Addr())
	}
	return nil
}

// RemoteAddr returns the peer's address (of the same types as LocalAddr's).
func (id *ID) RemoteAddr() net.Addr {
	id.mu.Lock()
	defer id.mu.Unlock()
	switch {
	case id.conn != nil:
		return id.addrOf(id.conn.RemoteAddr())
	case id.req != nil:
		return id.addrOf(id.req.RemoteAddr())
	}
	return nil
}

// PrivateData returns the peer's private data: of its connect request on
// the passive side, of its accept on the active side.
func (id *ID) PrivateData() []byte {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.peerPD
}

// PeerResources returns the connect request's responder resources and
// initiator depth (the peer's IRD and ORD).
func (id *ID) PeerResources() (responderResources, initiatorDepth int) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.peerIRD, id.peerORD
}

func (id *ID) post(ev Event) {
	id.mu.Lock()
	id.postLocked(ev)
	id.mu.Unlock()
}

// postLocked is post with id.mu held (so that Migrate moves the queue
// with no event passing it).
func (id *ID) postLocked(ev Event) {
	if ev.ID == nil {
		ev.ID = id
	}
	if id.ch != nil {
		id.ch.deliver(ev)
		return
	}
	select {
	case id.events <- ev:
	default: // an application that never reads events must not block the library
	}
}

// NextEvent returns the identifier's next connection event (rdma_get_cm_event
// for this id). A listening identifier yields EventConnectRequest events whose
// ID is the new request. An identifier attached to an EventChannel has
// its events there (ErrInvalid).
func (id *ID) NextEvent(ctx context.Context) (Event, error) {
	id.mu.Lock()
	st, ch := id.state, id.ch
	id.mu.Unlock()
	if st == stateClosed {
		return Event{}, ErrClosed
	}
	if ch != nil {
		return Event{}, errOnChannel
	}
	if st == stateListening {
		req, err := id.GetRequest(ctx)
		if err != nil {
			return Event{}, err
		}
		rd, ro := req.PeerResources()
		return Event{Type: EventConnectRequest, ID: req, Listen: id, PrivateData: req.PrivateData(), ResponderResources: rd, InitiatorDepth: ro}, nil
	}
	select {
	case ev := <-id.events:
		return ev, nil
	case <-id.done:
		return Event{}, ErrClosed
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// CreateQP creates the identifier's QP on its device (rdma_create_qp). With
// pd nil the device's default PD is used. When attr's CQs are nil, the
// identifier creates a send CQ and a receive CQ, each with its own
// completion channel (for GetSendComp / GetRecvComp), sized from the QP's
// capabilities. The QP is left in INIT, ready to be connected.
func (id *ID) CreateQP(pd *verbs.PD, attr verbs.QPInitAttr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return ErrClosed
	}
	if id.qp != nil {
		return fmt.Errorf("%w: the identifier already has a QP", verbs.ErrInvalid)
	}
	if pd == nil {
		pd = id.pd
	}
	if pd.Context() != id.vctx {
		return fmt.Errorf("%w: PD of another device", verbs.ErrInvalid)
	}
	if attr.QPType == 0 {
		attr.QPType = verbs.QPTRC
		if id.ps == PortSpaceUDP {
			attr.QPType = verbs.QPTUD
		}
	}
	if (id.ps == PortSpaceUDP) != (attr.QPType == verbs.QPTUD) {
		return fmt.Errorf("%w: the UDP port space has UD QPs, the TCP one RC QPs", verbs.ErrInvalid)
	}
	if attr.SendCQ == nil && attr.RecvCQ == nil {
		if err := id.createCQs(attr.Cap); err != nil {
			return err
		}
		attr.SendCQ, attr.RecvCQ = id.sendCQ, id.recvCQ
	} else if attr.SendCQ == nil || attr.RecvCQ == nil {
		return fmt.Errorf("%w: give both CQs or neither", verbs.ErrInvalid)
	} else {
		id.sendCQ, id.recvCQ = attr.SendCQ, attr.RecvCQ
		id.sendCh, id.recvCh = attr.SendCQ.Channel(), attr.RecvCQ.Channel()
	}
	qp, err := pd.CreateQP(attr)
	if err != nil {
		id.destroyCQs()
		return err
	}
	if id.ps == PortSpaceUDP {
		if err := readyUD(qp); err != nil {
			qp.Destroy()
			id.destroyCQs()
			return err
		}
		id.pd, id.qp = pd, qp
		return nil
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1,
		QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	if err := qp.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		qp.Destroy()
		id.destroyCQs()
		return err
	}
	id.pd, id.qp = pd, qp
	return nil
}

func (id *ID) createCQs(c verbs.QPCap) error {
	var err error
	if id.sendCh, err = id.vctx.CreateCompChannel(); err != nil {
		return err
	}
	if id.recvCh, err = id.vctx.CreateCompChannel(); err != nil {
		id.sendCh.Close()
		return err
	}
	if id.sendCQ, err = id.vctx.CreateCQ(max(c.MaxSendWR, 1), id.sendCh); err != nil {
		id.sendCh.Close()
		id.recvCh.Close()
		return err
	}
	if id.recvCQ, err = id.vctx.CreateCQ(max(c.MaxRecvWR, 1), id.recvCh); err != nil {
		id.sendCQ.Destroy()
		id.sendCh.Close()
		id.recvCh.Close()
		return err
	}
	id.ownCQs = true
	return nil
}

func (id *ID) destroyCQs() {
	if !id.ownCQs {
		return
	}
	id.sendCQ.Destroy()
	id.recvCQ.Destroy()
	id.sendCh.Close()
	id.recvCh.Close()
	id.sendCQ, id.recvCQ, id.sendCh, id.recvCh, id.ownCQs = nil, nil, nil, nil, false
}

// DestroyQP destroys the identifier's QP (rdma_destroy_qp) and the CQs it created.
func (id *ID) DestroyQP() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return ErrClosed
	}
	return id.destroyQP()
}

// destroyQP is DestroyQP with id.mu held.
func (id *ID) destroyQP() error {
	if id.qp == nil {
		return nil
	}
	err := id.qp.Destroy()
	id.qp = nil
	id.destroyCQs()
	return err
}

// Connect connects the identifier's QP to the listener at its address
// (rdma_connect) and waits for the outcome. The identifier needs a QP
// (CreateQP). On success an EventEstablished is also queued; a rejection
// returns a *RejectedError (and queues EventRejected), no answer an error
// wrapping ErrUnreachable (EventUnreachable). It waits for the answer
// until ctx's deadline, or 10 seconds when ctx has none (see the package
// doc, Errors).
func (id *ID) Connect(ctx context.Context, p *ConnParam) error {
	id.mu.Lock()
	if id.state != stateIdle || id.qp == nil {
		st, qp := id.state, id.qp
		id.mu.Unlock()
		if st == stateClosed {
			return ErrClosed
		}
		if qp == nil {
			return fmt.Errorf("%w: connect needs a QP (CreateQP)", verbs.ErrInvalidState)
		}
		return fmt.Errorf("%w: identifier in state %d", verbs.ErrInvalidState, st)
	}
	qp := id.qp
	id.mu.Unlock()
	if id.ps == PortSpaceUDP {
		return id.resolveUD(ctx, qp, p)
	}
	cp, err := params(p, id.tr.MaxPrivateData())
	if err != nil {
		return err
	}
	cp.Config = id.providerConfig()
	cp.Source = id.src
	conn, err := id.tr.Dial(ctx, id.addr, qp, cp)
	if err != nil {
		var rej *RejectedError
		switch {
		case errors.As(err, &rej):
			id.post(Event{Type: EventRejected, Err: err, PrivateData: rej.PrivateData})
		case errors.Is(err, ErrUnreachable):
			id.post(Event{Type: EventUnreachable, Err: err})
		default:
			id.post(Event{Type: EventConnectError, Err: err})
		}
		return err
	}
	return id.established(conn, Event{Type: EventEstablished, PrivateData: conn.PrivateData(), ResponderResources: conn.IRD(), InitiatorDepth: conn.ORD()})
}

// established records the connection, queues ev (EventEstablished) and
// watches the connection for the end, whose event therefore always comes
// after ev. An identifier closed meanwhile ends the connection at once
// and returns ErrClosed.
func (id *ID) established(conn cm.Conn, ev Event) error {
	id.mu.Lock()
	if id.state == stateClosed {
		id.mu.Unlock()
		conn.Disconnect()
		return ErrClosed
	}
	id.conn, id.state = conn, stateConnected
	if id.peerPD == nil {
		id.peerPD = conn.PrivateData()
	}
	id.mu.Unlock()
	id.post(ev)
	id.wg.Add(1)
	go func() {
		defer id.wg.Done()
		select {
		case <-conn.Done():
			id.mu.Lock()
			was := id.state
			if id.state == stateConnected {
				id.state = stateDisconnected
			}
			id.mu.Unlock()
			if was == stateConnected || was == stateDisconnected {
				id.post(Event{Type: EventDisconnected, Err: conn.Err()})
			}
		case <-id.done:
		}
	}()
	return nil
}

// Done returns a channel closed when the connection has ended (the peer
// disconnected, or Disconnect was called).
func (id *ID) Done() <-chan struct{} {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.conn == nil {
		return nil
	}
	return id.conn.Done()
}

// Disconnect ends the connection (rdma_disconnect): the QP moves to ERR and
// its outstanding work completes with WR_FLUSH_ERR, here and at the peer,
// which receives EventDisconnected; so does this identifier. Calling it
// after the peer disconnected is not an error.
func (id *ID) Disconnect() error {
	id.mu.Lock()
	conn := id.conn
	if id.state == stateClosed {
		id.mu.Unlock()
		return ErrClosed
	}
	if conn == nil {
		id.mu.Unlock()
		return fmt.Errorf("%w: not connected", verbs.ErrInvalidState)
	}
	// Disconnecting after the peer did is not an error: the connection is
	// down either way.
	id.state = stateDisconnected
	id.mu.Unlock()
	return conn.Disconnect()
}

// Close destroys the identifier (rdma_destroy_id / rdma_destroy_ep):
// disconnects it, stops listening, and destroys the QP and CQs it created.
// An unanswered connect request is rejected.
func (id *ID) Close() error {
	id.mu.Lock()
	if id.state == stateClosed {
		id.mu.Unlock()
		return nil
	}
	st := id.state
	id.state = stateClosed
	conn, req, ln := id.conn, id.req, id.ln
	close(id.done)
	id.stopPump()
	ch := id.ch
	id.mu.Unlock()
	if ch != nil {
		defer ch.detach()
	}
	if req != nil && st == stateRequest {
		req.Reject(nil)
	}
	if conn != nil {
		conn.Disconnect()
	}
	if ln != nil {
		ln.Close()
	}
	id.wg.Wait()
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.destroyQP()
}

// Dial creates an identifier for addr, creates its QP with attr (nil: an RC
// QP with 16 WRs and 1 SGE each way and its own CQs) and connects it, as
// rdma_create_ep followed by rdma_connect. Its errors are Connect's; the
// wait for the answer ends at ctx's deadline, however long, or after 10
// seconds when ctx has none.
func Dial(ctx context.Context, addr string, attr *verbs.QPInitAttr, p *ConnParam) (*ID, error) {
	return DialFrom(ctx, "", addr, attr, p)
}

// DialFrom is Dial from the local address src (see CreateIDFrom; "" lets
// the route choose, as Dial does).
func DialFrom(ctx context.Context, src, addr string, attr *verbs.QPInitAttr, p *ConnParam) (*ID, error) {
	id, err := CreateIDFrom(src, addr)
	if err != nil {
		return nil, err
	}
	a := defaultQPAttr(attr)
	if err := id.CreateQP(nil, a); err != nil {
		id.Close()
		return nil, err
	}
	if err := id.Connect(ctx, p); err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

func defaultQPAttr(attr *verbs.QPInitAttr) verbs.QPInitAttr {
	if attr != nil {
		return *attr
	}
	return verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
}

// Listen creates a listening identifier at addr (rdma_create_id +
// rdma_bind_addr + rdma_listen). Port 0 picks a free port (LocalAddr tells).
func Listen(addr string) (*ID, error) {
	id, err := CreateID(addr)
	if err != nil {
		return nil, err
	}
	if err := id.Listen(); err != nil {
		return nil, err
	}
	return id, nil
}

// Listen starts listening on the identifier's address (rdma_listen).
func (id *ID) Listen() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return ErrClosed
	}
	if id.state != stateIdle {
		return fmt.Errorf("%w: identifier in state %d", verbs.ErrInvalidState, id.state)
	}
	if r, ok := id.tr.(cm.Router); ok && id.qp == nil {
		// A listener's device is its own address's (rdma_bind_addr), not
		// the one a connection to it would leave from.
		name, err := r.DeviceFor(id.addr, true)
		if err != nil {
			return err
		}
		if name != id.vctx.Device().Name() {
			if id.vctx, id.pd, err = deviceContext(name); err != nil {
				return err
			}
		}
	}
	var ln cm.Listener
	var err error
	if id.ps == PortSpaceUDP {
		ud, ok := id.tr.(cm.UDResolver)
		if !ok {
			return fmt.Errorf("%w: the UDP port space over %s", verbs.ErrNotSupported, id.tr.Name())
		}
		ln, err = ud.ListenUD(id.addr, id.pcfg)
	} else {
		ln, err = id.tr.Listen(id.addr, id.pcfg)
	}
	if err != nil {
		return err
	}
	id.ln, id.state = ln, stateListening
	if id.ch != nil {
		id.startPump()
	}
	return nil
}

// GetRequest waits for the next connection request on a listening
// identifier (rdma_get_request) and returns a new identifier for it, with
// the requester's private data and resources. When the listener was made by
// CreateEP with QP attributes, the new identifier already has its QP.
// Answer it with Accept or Reject. A failure to accept a connection is
// reported as an *AcceptError; the listener keeps listening. A listener
// attached to an EventChannel has its requests there (ErrInvalid).
func (id *ID) GetRequest(ctx context.Context) (*ID, error) {
	id.mu.Lock()
	ch := id.ch
	id.mu.Unlock()
	if ch != nil {
		return nil, errOnChannel
	}
	return id.getRequest(ctx)
}

// getRequest is GetRequest, for the caller and for an EventChannel's pump.
func (id *ID) getRequest(ctx context.Context) (*ID, error) {
	id.mu.Lock()
	ln, st := id.ln, id.state
	id.mu.Unlock()
	if st == stateClosed {
		return nil, ErrClosed
	}
	if st != stateListening {
		return nil, fmt.Errorf("%w: not listening", verbs.ErrInvalidState)
	}
	r, err := ln.Next(ctx)
	for err == nil && cm.Refused() {
		r.Reject(nil) // an injected fault: the dialer sees a plain rejection
		r, err = ln.Next(ctx)
	}
	if err != nil {
		if errors.Is(err, cm.ErrClosed) {
			return nil, ErrClosed
		}
		return nil, err
	}
	nid := &ID{tr: id.tr, ps: id.ps, vctx: id.vctx, pd: id.pd, events: make(chan Event, 64), done: make(chan struct{}),
		state: stateRequest, req: r, peerPD: r.PrivateData(), peerIRD: r.IRD(), peerORD: r.ORD(), listenID: id}
	if id.qpAttr != nil {
		if err := nid.CreateQP(nil, *id.qpAttr); err != nil {
			r.Reject(nil)
			return nil, err
		}
	}
	return nid, nil
}

// Accept accepts the connection request of this identifier (rdma_accept)
// with the identifier's QP. On success the connection is established and
// EventEstablished is queued.
func (id *ID) Accept(ctx context.Context, p *ConnParam) error {
	id.mu.Lock()
	if id.state != stateRequest || id.qp == nil {
		st, qp := id.state, id.qp
		id.mu.Unlock()
		if st == stateClosed {
			return ErrClosed
		}
		if qp == nil {
			return fmt.Errorf("%w: accept needs a QP (CreateQP)", verbs.ErrInvalidState)
		}
		return fmt.Errorf("%w: no connection request to accept (state %d)", verbs.ErrInvalidState, st)
	}
	req, qp := id.req, id.qp
	id.mu.Unlock()
	maxPD := id.tr.MaxPrivateData()
	if id.ps == PortSpaceUDP {
		maxPD = maxUDPrivateData // the provider checks its own limit
	}
	cp, err := params(p, maxPD)
	if err != nil {
		return err
	}
	if p == nil {
		cp.IRD, cp.ORD = 128, 128
	}
	conn, err := req.Accept(qp, cp)
	if err != nil {
		id.mu.Lock()
		if id.state != stateClosed {
			id.state = stateDisconnected
		}
		id.mu.Unlock()
		return err
	}
	return id.established(conn, Event{Type: EventEstablished, ResponderResources: conn.IRD(), InitiatorDepth: conn.ORD()})
}

// Reject refuses the connection request of this identifier (rdma_reject),
// sending privateData to the requester.
func (id *ID) Reject(privateData []byte) error {
	id.mu.Lock()
	if id.state != stateRequest {
		st := id.state
		id.mu.Unlock()
		if st == stateClosed {
			return ErrClosed
		}
		return fmt.Errorf("%w: no connection request to reject", verbs.ErrInvalidState)
	}
	id.state = stateDisconnected
	req := id.req
	id.mu.Unlock()
	if len(privateData) > id.tr.MaxPrivateData() {
		return fmt.Errorf("%w: %d bytes of private data", verbs.ErrInvalid, len(privateData))
	}
	return req.Reject(privateData)
}

// CreateEP creates an endpoint as rdma_create_ep does: with passive false,
// an identifier for addr with a QP made from qpAttr (when not nil), ready
// for Connect; with passive true, a listening identifier whose requests get
// QPs made from qpAttr. pd nil means the device's default PD.
func CreateEP(addr string, passive bool, pd *verbs.PD, qpAttr *verbs.QPInitAttr) (*ID, error) {
	id, err := CreateID(addr)
	if err != nil {
		return nil, err
	}
	if pd != nil {
		id.pd = pd
	}
	if passive {
		if qpAttr != nil {
			a := *qpAttr
			id.qpAttr = &a
		}
		if err := id.Listen(); err != nil {
			return nil, err
		}
		return id, nil
	}
	if qpAttr != nil {
		if err := id.CreateQP(pd, *qpAttr); err != nil {
			return nil, err
		}
	}
	return id, nil
}
