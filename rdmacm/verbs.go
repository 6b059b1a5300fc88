package rdmacm

import (
	"context"
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

// This file is rdma_verbs.h: the one-call helpers on a connection
// identifier. Each is a thin layer over the identifier's QP and CQs and keeps
// the rules of its man page.

// RegMsgs registers buf for sending and receiving messages (rdma_reg_msgs):
// local write access.
func (id *ID) RegMsgs(buf []byte) (*verbs.MR, error) {
	return id.pd.RegMR(buf, verbs.AccessLocalWrite)
}

// RegRead registers buf as the target of the peer's RDMA reads (rdma_reg_read).
func (id *ID) RegRead(buf []byte) (*verbs.MR, error) {
	return id.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
}

// RegWrite registers buf as the target of the peer's RDMA writes (rdma_reg_write).
func (id *ID) RegWrite(buf []byte) (*verbs.MR, error) {
	return id.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
}

// Dereg deregisters a region (rdma_dereg_mr).
func (id *ID) Dereg(mr *verbs.MR) error { return mr.Dereg() }

// sgeOf returns the SGE for buf, which must lie inside mr (the buffer must be
// registered, rdma_post_recv(3) and rdma_post_send(3) say).
func sgeOf(buf []byte, mr *verbs.MR) (verbs.SGE, error) {
	if mr == nil {
		return verbs.SGE{}, fmt.Errorf("%w: buffer is not registered (nil memory region)", verbs.ErrInvalid)
	}
	return mr.SGEOf(buf)
}

func (id *ID) liveQP() (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp == nil {
		return nil, fmt.Errorf("%w: no QP is associated with the identifier", verbs.ErrInvalidState)
	}
	return id.qp, nil
}

// PostRecv posts buf, which must lie in the registered region mr and stay
// registered until the receive completes, to receive the next message
// (rdma_post_recv). The completion's WRID is wrid. The identifier must have
// a QP. The peer's message must fit buf.
func (id *ID) PostRecv(wrid uint64, buf []byte, mr *verbs.MR) error {
	sge, err := sgeOf(buf, mr)
	if err != nil {
		return err
	}
	return id.PostRecvv(wrid, []verbs.SGE{sge})
}

// PostRecvv posts a scatter list to receive one message (rdma_post_recvv).
func (id *ID) PostRecvv(wrid uint64, sgl []verbs.SGE) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return unwrapPost(qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: sgl}}))
}

// PostSend sends buf as one message (rdma_post_send). buf must lie in mr
// unless flags has SendInline (then mr may be nil and buf any memory). Only
// after the identifier is connected; the peer must have a receive posted.
func (id *ID) PostSend(wrid uint64, buf []byte, mr *verbs.MR, flags verbs.SendFlags) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: flags}
	if flags&verbs.SendInline != 0 && mr == nil {
		wr.Inline = buf
		if wr.Inline == nil {
			wr.Inline = []byte{}
		}
	} else {
		sge, err := sgeOf(buf, mr)
		if err != nil {
			return err
		}
		wr.SGList = []verbs.SGE{sge}
	}
	return unwrapPost(qp.PostSend([]verbs.SendWR{wr}))
}

// PostSendv sends the scatter/gather list sgl as one message
// (rdma_post_sendv). flags are those of ibv_post_send (SendSignaled,
// SendInline, SendFence, SendSolicited); unless inline, the buffers must be
// registered and stay so until the send completes. Only after the
// identifier is connected. The completion's WRID is wrid.
func (id *ID) PostSendv(wrid uint64, sgl []verbs.SGE, flags verbs.SendFlags) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return unwrapPost(qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRSend, Flags: flags, SGList: sgl}}))
}

// PostRead reads len(buf) bytes at remoteAddr of the peer's region rkey into
// buf, which lies in mr (rdma_post_read).
func (id *ID) PostRead(wrid uint64, buf []byte, mr *verbs.MR, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	sge, err := sgeOf(buf, mr)
	if err != nil {
		return err
	}
	return id.PostReadv(wrid, []verbs.SGE{sge}, flags, remoteAddr, rkey)
}

// PostReadv reads into a scatter list (rdma_post_readv).
func (id *ID) PostReadv(wrid uint64, sgl []verbs.SGE, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return unwrapPost(qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: flags, SGList: sgl, RemoteAddr: remoteAddr, RKey: rkey}}))
}

// PostWrite writes buf (in mr, or any memory with SendInline and mr nil) to
// remoteAddr of the peer's region rkey (rdma_post_write).
func (id *ID) PostWrite(wrid uint64, buf []byte, mr *verbs.MR, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: flags, RemoteAddr: remoteAddr, RKey: rkey}
	if flags&verbs.SendInline != 0 && mr == nil {
		wr.Inline = buf
	} else {
		sge, err := sgeOf(buf, mr)
		if err != nil {
			return err
		}
		wr.SGList = []verbs.SGE{sge}
	}
	return unwrapPost(qp.PostSend([]verbs.SendWR{wr}))
}

// PostWritev writes a gather list (rdma_post_writev).
func (id *ID) PostWritev(wrid uint64, sgl []verbs.SGE, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return unwrapPost(qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: flags, SGList: sgl, RemoteAddr: remoteAddr, RKey: rkey}}))
}

// unwrapPost turns the PostError of a one-request list into its cause.
func unwrapPost(err error) error {
	if pe, ok := err.(*verbs.PostError); ok {
		return pe.Err
	}
	return err
}

// GetSendComp waits for the next send completion (rdma_get_send_comp).
// See GetRecvComp.
func (id *ID) GetSendComp(ctx context.Context) (verbs.WC, error) {
	return id.getComp(ctx, true)
}

// GetRecvComp waits for the next receive completion (rdma_get_recv_comp):
// it polls the identifier's receive CQ and, when it is empty, blocks until
// a receive completes or ctx is done. It is meant for identifiers with their
// own, separate send and receive CQs (those CreateQP makes); on an
// identifier whose CQs are shared it returns ErrInvalid, since it could
// consume a send completion. The completion may carry an error status: check
// WC.Status.
func (id *ID) GetRecvComp(ctx context.Context) (verbs.WC, error) {
	return id.getComp(ctx, false)
}

func (id *ID) getComp(ctx context.Context, send bool) (verbs.WC, error) {
	id.mu.Lock()
	cq, ch := id.recvCQ, id.recvCh
	if send {
		cq, ch = id.sendCQ, id.sendCh
	}
	shared := id.sendCQ == id.recvCQ
	id.mu.Unlock()
	var wc [1]verbs.WC
	if cq == nil {
		return verbs.WC{}, fmt.Errorf("%w: the identifier has no CQs", verbs.ErrInvalidState)
	}
	if shared {
		return verbs.WC{}, fmt.Errorf("%w: the identifier's send and receive CQs are the same CQ", verbs.ErrInvalid)
	}
	for {
		n, err := cq.Poll(wc[:])
		if err != nil || n == 1 {
			return wc[0], err
		}
		if ch == nil {
			if err := cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
			continue
		}
		// The C sequence: arm, poll again (a completion may have slipped in),
		// then wait for the event and acknowledge it.
		if err := cq.ReqNotify(false); err != nil {
			return verbs.WC{}, err
		}
		if n, err := cq.Poll(wc[:]); err != nil || n == 1 {
			return wc[0], err
		}
		evcq, err := ch.GetEvent(ctx)
		if err != nil {
			return verbs.WC{}, err
		}
		ch.AckEvents(evcq, 1)
	}
}
