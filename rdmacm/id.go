package rdmacm

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/verbs"
)

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

	pcfg any       // IDOptions' configuration of the transport
	ps   PortSpace // NewID's
	ud   *UDParam  // a UD identifier's resolved peer

	src      string             // CreateIDFrom's source, for a cm.Sourcer
	ch       *EventChannel      // Migrate's: where events go (nil: events)
	pumpStop context.CancelFunc // ends a listener's pump to ch
}

// DeviceContext returns the device context the identifier is bound to
// (the verbs field of rdma_cm_id). It changes only when a connect or listen
// picks another device before a QP exists.
func (id *ID) DeviceContext() *verbs.Context {
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
	return nil, fmt.Errorf("%w: a source address over %s", errNotSupported, t.Name())
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
