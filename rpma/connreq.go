package rpma

import (
	"context"
	"errors"
	"strconv"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// ConnReq is a connection request (struct rpma_conn_req): on the active
// side one made by NewConnReq towards a server, on the passive side one
// received by Ep.NextConnReq. Its queue pair and CQs exist already, so
// receives can be posted before the connection is made (Recv). Connect
// turns it into a Conn; Delete drops it (rejecting an incoming request).
type ConnReq struct {
	peer    *Peer
	id      *rdmacm.ID
	cfg     ConnCfg
	passive bool
	cq, rcq *CQ
	ch      *verbs.CompChannel // shared channel, if any
	srq     *SRQ
	done    bool
}

// NewConnReq creates a request to connect to the server at addr and port
// (rpma_conn_req_new); cfg nil means the defaults. It returns ErrInval for
// a nil peer or an empty address or port, and ErrProvider when the
// identifier, the CQs or the QP cannot be created.
func NewConnReq(peer *Peer, addr, port string, cfg *ConnCfg) (*ConnReq, error) {
	switch {
	case peer == nil:
		return nil, wrap(ErrInval, "no peer (NewPeer)")
	case addr == "":
		return nil, wrap(ErrInval, "no server address")
	case port == "":
		return nil, wrap(ErrInval, "no port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, wrap(ErrInval, "port %q is not a number from 0 to 65535", port)
	}
	id, err := rdmacm.CreateID(cmAddr(addr, port))
	if err != nil {
		return nil, provider("rdma_create_id", err)
	}
	r := &ConnReq{peer: peer, id: id, cfg: *cfg.orDefault()}
	if err := r.setup(); err != nil {
		id.Close()
		return nil, err
	}
	return r, nil
}

// setup creates the request's CQs and QP.
func (r *ConnReq) setup() error {
	cfg := &r.cfg
	ctx := r.peer.ctx
	if r.id.DeviceContext() != ctx {
		return wrap(ErrInval, "the peer's device context is not the one that serves connections (use DeviceContext)")
	}
	var err error
	if cfg.shared {
		if r.ch, err = ctx.CreateCompChannel(); err != nil {
			return provider("ibv_create_comp_channel", err)
		}
	}
	r.srq = cfg.srq
	cqSize := cfg.CQSize()
	if cfg.RCQSize() == 0 && (r.srq == nil || r.srq.rcq == nil) {
		cqSize = max(cqSize, cfg.SQSize()+cfg.RQSize()) // receives complete here too
	}
	if r.cq, err = newCQ(ctx, cqSize, r.ch); err != nil {
		r.free()
		return err
	}
	recvCQ := r.cq
	switch {
	case r.srq != nil && r.srq.rcq != nil:
		recvCQ = r.srq.rcq
	case cfg.RCQSize() > 0:
		if r.rcq, err = newCQ(ctx, cfg.RCQSize(), r.ch); err != nil {
			r.free()
			return err
		}
		recvCQ = r.rcq
	}
	attr := verbs.QPInitAttr{SendCQ: r.cq.cq, RecvCQ: recvCQ.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: max(cfg.SQSize(), 1), MaxRecvWR: max(cfg.RQSize(), 1), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 8}}
	if r.srq != nil {
		attr.SRQ = r.srq.srq
	}
	if err := r.id.CreateQP(r.peer.pd, attr); err != nil {
		r.free()
		return provider("rdma_create_qp", err)
	}
	return nil
}

// free destroys the request's QP and CQs.
func (r *ConnReq) free() {
	r.id.DestroyQP()
	if r.cq != nil {
		r.cq.destroy()
		r.cq = nil
	}
	if r.rcq != nil {
		r.rcq.destroy()
		r.rcq = nil
	}
	if r.ch != nil {
		r.ch.Close()
		r.ch = nil
	}
}

// Recv posts a receive of up to n bytes into dst at off, completed with
// opCtx, before the connection is made (rpma_conn_req_recv). It returns
// ErrInval for bad arguments or when the request uses an SRQ, and
// ErrProvider when posting fails.
func (r *ConnReq) Recv(dst *MR, off, n int, opCtx uint64) error {
	if r == nil || dst == nil || r.done {
		return wrap(ErrInval, "nil or used request, or nil region")
	}
	if r.srq != nil {
		return wrap(ErrInval, "the request uses an SRQ: post receives with SRQ.Recv")
	}
	return postRecv(r.id.QP(), dst, off, n, opCtx)
}

func postRecv(qp *verbs.QP, dst *MR, off, n int, opCtx uint64) error {
	if err := checkRange("recv", off, n, uint64(dst.Size())); err != nil {
		return err
	}
	wr := [1]verbs.RecvWR{{WRID: opCtx, SGList: []verbs.SGE{dst.mr.SGE(off, n)}}}
	if err := qp.PostRecv(wr[:]); err != nil {
		return provider("ibv_post_recv", err)
	}
	return nil
}

// PrivateData returns the private data of an incoming request
// (rpma_conn_req_get_private_data); nil on the active side.
func (r *ConnReq) PrivateData() []byte {
	if r == nil || !r.passive {
		return nil
	}
	return r.id.PrivateData()
}

// Connect makes the connection (rpma_conn_req_connect): on the active side
// it connects to the server, on the passive side it accepts the request;
// pdata (at most 255 bytes, and what the transport carries) goes to the
// other side. The request
// is used up, whatever the outcome.
//
// As in librpma, a connection the server rejects or that cannot reach the
// server is still returned: its first event (Conn.NextEvent) is
// ConnRejected or ConnUnreachable. The first event of a connection that is
// made is ConnEstablished. On the active side, when ctx has no deadline,
// the configuration's timeout bounds the wait for the server's answer.
// Connect returns ErrInval for a used request or
// private data too long, and ErrProvider for other failures.
func (r *ConnReq) Connect(ctx context.Context, pdata []byte) (*Conn, error) {
	if r == nil || r.done {
		return nil, wrap(ErrInval, "nil or used connection request")
	}
	if len(pdata) > 255 {
		return nil, wrap(ErrInval, "%d bytes of private data (at most 255)", len(pdata))
	}
	r.done = true
	c, err := newConn(r)
	if err != nil {
		r.delete()
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok && !r.passive && r.cfg.Timeout() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout())
		defer cancel()
	}
	p := &rdmacm.ConnParam{PrivateData: pdata, ResponderResources: rdmacm.MaxDepth, InitiatorDepth: rdmacm.MaxDepth,
		RetryCount: 7, RNRRetryCount: 7, Extensions: r.cfg.Extensions() && !r.passive}
	if r.passive {
		err = r.id.Accept(ctx, p)
	} else {
		err = r.id.Connect(ctx, p)
	}
	var rej *rdmacm.RejectedError
	switch {
	case err == nil:
		if !r.passive {
			c.readyToReceive()
		}
	case !r.passive && (errors.As(err, &rej) || errors.Is(err, rdmacm.ErrUnreachable)):
		if rej != nil {
			c.rejectPD = rej.PrivateData
		}
		c.connErr = err
		// The event (REJECTED, UNREACHABLE) is queued for NextEvent.
	default:
		c.Delete()
		if errors.Is(err, verbs.ErrInvalid) {
			return nil, wrap(ErrInval, "%v", err)
		}
		return nil, provider("connect", err)
	}
	c.start()
	return c, nil
}

// Delete drops the request (rpma_conn_req_delete): an incoming request is
// rejected, and the request's QP and CQs are destroyed.
func (r *ConnReq) Delete() error {
	if r == nil {
		return wrap(ErrInval, "nil connection request")
	}
	if r.done {
		return nil
	}
	r.done = true
	if r.passive {
		if err := r.id.Reject(nil); err != nil {
			logAt(LogWarning, "rdma_reject", "err", err)
		}
	}
	return r.delete()
}

func (r *ConnReq) delete() error {
	r.free()
	if err := r.id.Close(); err != nil {
		return provider("rdma_destroy_id", err)
	}
	return nil
}
