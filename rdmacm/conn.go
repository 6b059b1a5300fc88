package rdmacm

import (
	"context"
	"errors"
	"fmt"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/errfmt"
	"github.com/goverbs/goverbs/verbs"
)

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
			return fmt.Errorf("%w: connect needs a QP (CreateQP)", errInvalidState)
		}
		return fmt.Errorf("%w: identifier in state %d", errInvalidState, st)
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
		err = public(err)
		var rej *RejectedError
		if !errors.As(err, &rej) {
			// Not a rejection (which is rdmacm's own type): the
			// transport's error, said to be rdmacm's connect.
			err = errfmt.Wrap(err, "rdmacm: connect %s", id.addr)
		}
		switch {
		case rej != nil:
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
		return fmt.Errorf("%w: not connected", errInvalidState)
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
		return fmt.Errorf("%w: identifier in state %d", errInvalidState, id.state)
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
			return fmt.Errorf("%w: the UDP port space over %s", errNotSupported, id.tr.Name())
		}
		ln, err = ud.ListenUD(id.addr, id.pcfg)
	} else {
		ln, err = id.tr.Listen(id.addr, id.pcfg)
	}
	if err != nil {
		// The transport's error (a *net.OpError over TCP) stays
		// reachable with errors.As; the message says who failed.
		return errfmt.Wrap(err, "rdmacm: listen %s", id.addr)
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
		return nil, fmt.Errorf("%w: not listening", errInvalidState)
	}
	r, err := ln.Next(ctx)
	for err == nil && cm.Refused() {
		r.Reject(nil) // an injected fault: the dialer sees a plain rejection
		r, err = ln.Next(ctx)
	}
	if err != nil {
		return nil, public(err)
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
			return fmt.Errorf("%w: accept needs a QP (CreateQP)", errInvalidState)
		}
		return fmt.Errorf("%w: no connection request to accept (state %d)", errInvalidState, st)
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
	conn, err := req.Accept(qp, cp)
	if err != nil {
		id.mu.Lock()
		if id.state != stateClosed {
			id.state = stateDisconnected
		}
		id.mu.Unlock()
		return public(err)
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
		return fmt.Errorf("%w: no connection request to reject", errInvalidState)
	}
	id.state = stateDisconnected
	req := id.req
	id.mu.Unlock()
	if len(privateData) > id.tr.MaxPrivateData() {
		return fmt.Errorf("%w: %d bytes of private data", errInvalid, len(privateData))
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
