package engine

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Claim returns the Endpoint of qp, a QP of type typ on device d, for a
// connection manager that is about to connect it (Endpoint.Establish). It
// fails with ErrInvalid for a QP of another device or type, and with
// ErrInvalidState unless the QP is in RESET or INIT.
func Claim(qp *verbs.QP, d *Device, typ verbs.QPType) (Endpoint, error) {
	q, ok := driver.QPOf(qp).(*QP)
	if !ok || q.dev != d {
		return Endpoint{}, fmt.Errorf("%w: QP is not on device %s", verbs.ErrInvalid, d.cfg.Name)
	}
	if q.typ != typ {
		return Endpoint{}, fmt.Errorf("%w: %s connects %v QPs, not %v", verbs.ErrInvalid, d.cfg.Name, typ, q.typ)
	}
	if st := q.State(); st != verbs.QPSReset && st != verbs.QPSInit {
		return Endpoint{}, fmt.Errorf("%w: QP in %v (RESET or INIT needed)", verbs.ErrInvalidState, st)
	}
	return Endpoint{q}, nil
}

// ConnParams are what a connection manager negotiated for a QP.
type ConnParams struct {
	// IRD and ORD are the inbound and outbound RDMA read/atomic depths.
	IRD, ORD uint8
	// RNRRetry is the QP's rnr_retry (rdma_conn_param's rnr_retry_count,
	// which no Modify transition sets); 7 retries for ever.
	RNRRetry uint8
	// Access is the QP's access flags when it is still in RESET
	// (rdma_create_qp moves it to INIT with rdma_cm's defaults).
	Access verbs.AccessFlags
	// Deny lists the opcodes the connected peer cannot execute: PostSend
	// refuses them with ErrNotSupported (an iWARP peer without the RFC 7306
	// extensions gets no immediate data and no atomics).
	Deny []verbs.WROpcode
}

// Establish moves the QP, in RESET or INIT, to RTS on a connection made by
// a connection manager: t carries its traffic from now on. Receives posted
// before remain posted; sends posted later go out on t. When t is a
// Progressor, the QP's CQs drive it from now on (polled mode).
func (e Endpoint) Establish(t Transport, p ConnParams) error {
	q := e.q
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	if q.state != verbs.QPSReset && q.state != verbs.QPSInit {
		st := q.state
		q.mu.Unlock()
		return fmt.Errorf("%w: QP in %v cannot be connected (RESET or INIT needed)", verbs.ErrInvalidState, st)
	}
	if q.state == verbs.QPSReset {
		q.attr.PortNum = 1
		q.attr.QPAccessFlags = p.Access
		q.aaccess.Store(uint32(p.Access))
	}
	var m uint32
	for _, op := range p.Deny {
		m |= 1 << op
	}
	q.deny.Store(m)
	q.setTransport(t)
	q.attr.MaxDestRdAtomic, q.attr.MaxRdAtomic = p.IRD, p.ORD
	q.attr.RNRRetry = min(p.RNRRetry, 7)
	q.aird.Store(uint32(p.IRD))
	q.setState(verbs.QPSRTS)
	q.attachProgress()
	q.mu.Unlock()
	q.progress()
	return nil
}

// setTransport attaches t and notes whether it has the direct path and
// batches; q.mu is held (or q is not shared yet).
func (q *QP) setTransport(t Transport) {
	q.t = t
	q.direct, _ = t.(DirectSender)
	q.lanes, _ = t.(LaneSender)
	if q.direct == nil {
		q.lanes = nil // a lane's window is a DirectSender's
	}
	q.batch, _ = t.(Batcher)
}

// attachProgress makes the QP's CQs drive its transport when it is a
// Progressor and they do not yet; q.mu is held.
func (q *QP) attachProgress() {
	if q.prog.Load() != nil {
		return
	}
	if pr, ok := q.t.(Progressor); ok {
		g := newProgress(q, pr)
		q.prog.Store(g)
		g.attach()
	}
}

// detach stops the QP's CQs driving its transport: it left the connected
// states.
func (q *QP) detach() {
	if p := q.prog.Swap(nil); p != nil {
		p.detach()
	}
}

// cmOnly reports the error of an application's Modify that only a
// connection manager may make: to RTR, or to RTS from INIT or RTR.
func (q *QP) cmOnly(from, to verbs.QPState) error {
	if !q.cm {
		return nil
	}
	if to == verbs.QPSRTR || (to == verbs.QPSRTS && from != verbs.QPSRTS && from != verbs.QPSSQD) {
		if err := q.dev.cfg.CMOnly; err != nil {
			return err
		}
		return fmt.Errorf("%w: %s QPs are connected by the connection manager, not by Modify", verbs.ErrInvalid, q.dev.cfg.Name)
	}
	return nil
}

// unconnected is the transport of a QP that none carries yet: a QP of a
// connection manager's device before it connects it, or one whose
// provider gave none. Nothing can be sent.
type unconnected struct{ q *QP }

func (unconnected) Send(*WQE) Result { return Fail(verbs.WCWRFlushErr) }
func (unconnected) RecvPosted()      {}
func (unconnected) Modify(*verbs.QPAttr, verbs.QPAttrMask, verbs.QPState, verbs.QPState) error {
	return nil
}
func (unconnected) Shutdown(bool) {}
