package rdmacm

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// This file is rdma_verbs.h: the one-call helpers on a connection
// identifier. Each is a thin layer over the identifier's QP and CQs and keeps
// the rules of its man page.

// RegMsgs registers buf for sending and receiving messages (rdma_reg_msgs):
// local write access.
func (id *ID) RegMsgs(buf []byte) (*verbs.MR, error) {
	pd, err := id.livePD()
	if err != nil {
		return nil, err
	}
	return pd.RegMR(buf, verbs.AccessLocalWrite)
}

// RegRead registers buf as the target of the peer's RDMA reads (rdma_reg_read).
func (id *ID) RegRead(buf []byte) (*verbs.MR, error) {
	pd, err := id.livePD()
	if err != nil {
		return nil, err
	}
	return pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
}

// RegWrite registers buf as the target of the peer's RDMA writes (rdma_reg_write).
func (id *ID) RegWrite(buf []byte) (*verbs.MR, error) {
	pd, err := id.livePD()
	if err != nil {
		return nil, err
	}
	return pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
}

// Dereg deregisters a region (rdma_dereg_mr). A region outlives the
// identifier it was registered through: Dereg works after Close too.
func (id *ID) Dereg(mr *verbs.MR) error { return mr.Dereg() }

// livePD is the identifier's PD, or ErrClosed.
func (id *ID) livePD() (*verbs.PD, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return nil, ErrClosed
	}
	return id.pd, nil
}

// sgeOf returns the SGE for buf, which must lie inside mr (the buffer must be
// registered, rdma_post_recv(3) and rdma_post_send(3) say).
func sgeOf(buf []byte, mr *verbs.MR) (verbs.SGE, error) {
	if mr == nil {
		return verbs.SGE{}, fmt.Errorf("%w: buffer is not registered (nil memory region)", errInvalid)
	}
	return mr.SGEOf(buf)
}

func (id *ID) liveQP() (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return nil, ErrClosed
	}
	if id.qp == nil {
		return nil, fmt.Errorf("%w: no QP is associated with the identifier", errInvalidState)
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
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return postRecv(qp, wrid, nil, &sge)
}

// PostRecvv posts a scatter list to receive one message (rdma_post_recvv).
func (id *ID) PostRecvv(wrid uint64, sgl []verbs.SGE) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return postRecv(qp, wrid, sgl, nil)
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
		return postSend(qp, &wr, &sge)
	}
	return postSend(qp, &wr, nil)
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
	return postSend(qp, &verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: flags, SGList: sgl}, nil)
}

// PostRead reads len(buf) bytes at remoteAddr of the peer's region rkey into
// buf, which lies in mr (rdma_post_read).
func (id *ID) PostRead(wrid uint64, buf []byte, mr *verbs.MR, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	sge, err := sgeOf(buf, mr)
	if err != nil {
		return err
	}
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return postSend(qp, &verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: flags, RemoteAddr: remoteAddr, RKey: rkey}, &sge)
}

// PostReadv reads into a scatter list (rdma_post_readv).
func (id *ID) PostReadv(wrid uint64, sgl []verbs.SGE, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return postSend(qp, &verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: flags, SGList: sgl, RemoteAddr: remoteAddr, RKey: rkey}, nil)
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
		return postSend(qp, &wr, &sge)
	}
	return postSend(qp, &wr, nil)
}

// PostWritev writes a gather list (rdma_post_writev).
func (id *ID) PostWritev(wrid uint64, sgl []verbs.SGE, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	return postSend(qp, &verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: flags, SGList: sgl, RemoteAddr: remoteAddr, RKey: rkey}, nil)
}

// scratch holds the one-request lists the helpers post, from a pool, so
// that posting allocates nothing: the provider copies a request into its
// queue before PostSend or PostRecv returns.
type scratch struct {
	swr [1]verbs.SendWR
	rwr [1]verbs.RecvWR
	sge [1]verbs.SGE
	wc  [1]verbs.WC // for GetRecvComp and GetSendComp
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// postSend posts *wr, its SGE list sge when sge is not nil.
func postSend(qp *verbs.QP, wr *verbs.SendWR, sge *verbs.SGE) error {
	s := scratchPool.Get().(*scratch)
	s.swr[0] = *wr
	if sge != nil {
		s.sge[0] = *sge
		s.swr[0].SGList = s.sge[:]
	}
	err := qp.PostSend(s.swr[:])
	*s = scratch{} // keeps no buffer, region or AH alive
	scratchPool.Put(s)
	return unwrapPost(err)
}

// postRecv posts a receive of sgl, or of the one SGE sge when it is not nil.
func postRecv(qp *verbs.QP, wrid uint64, sgl []verbs.SGE, sge *verbs.SGE) error {
	s := scratchPool.Get().(*scratch)
	s.rwr[0] = verbs.RecvWR{WRID: wrid, SGList: sgl}
	if sge != nil {
		s.sge[0] = *sge
		s.rwr[0].SGList = s.sge[:]
	}
	err := qp.PostRecv(s.rwr[:])
	*s = scratch{}
	scratchPool.Put(s)
	return unwrapPost(err)
}

// unwrapPost turns the PostError of a one-request list into its cause.
func unwrapPost(err error) error {
	if pe, ok := err.(*verbs.PostError); ok {
		return pe.Err
	}
	return err
}

// GetSendComp waits for the next send completion (rdma_get_send_comp).
// See GetRecvComp. A request posted without SendSignaled completes only if
// it fails: GetSendComp does not wait for one that succeeds (see package
// verbs, Completion semantics), and over iWARP a SEND or WRITE completes
// once sent, an error the peer finds arriving after it.
func (id *ID) GetSendComp(ctx context.Context) (verbs.WC, error) {
	return id.getComp(ctx, true)
}

// GetRecvComp waits for the next receive completion (rdma_get_recv_comp):
// it polls the identifier's receive CQ for up to the CQ's WaitSpin
// (verbs.DefaultWaitSpin unless CQ.SetWaitSpin changed it: a CPU kept busy
// that long, for a reply that comes without a wake-up's tens of
// microseconds), then blocks until a receive completes or ctx is done
// (librdmacm blocks at once). It is meant for identifiers with their
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
	closed := id.state == stateClosed
	id.mu.Unlock()
	if closed {
		return verbs.WC{}, ErrClosed
	}
	if cq == nil {
		return verbs.WC{}, fmt.Errorf("%w: the identifier has no CQs", errInvalidState)
	}
	if shared {
		return verbs.WC{}, fmt.Errorf("%w: the identifier's send and receive CQs are the same CQ", errInvalid)
	}
	wc, err := waitComp(ctx, id.done, cq, ch)
	if err != nil {
		id.mu.Lock()
		closed = id.state == stateClosed
		id.mu.Unlock()
		if closed {
			// Close destroyed the CQ or its channel under the wait.
			return verbs.WC{}, ErrClosed
		}
	}
	return wc, err
}

// waitComp takes one completion of cq: it polls for up to the CQ's
// SpinFor, then waits on ch (or CQ.Wait without one), and tells the CQ's
// adaptive spin how long the wait took. The spin ends early when ctx
// ends or done (the identifier's) is closed.
func waitComp(ctx context.Context, done <-chan struct{}, cq *verbs.CQ, ch *verbs.CompChannel) (verbs.WC, error) {
	// The slice Poll fills would escape (an interface call): it comes
	// from the pool.
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	wc := &s.wc
	n, err := cq.Poll(wc[:])
	if err != nil || n == 1 {
		return wc[0], err
	}
	if ch == nil {
		// CQ.Wait spins and adapts; the poll above was the last look (a
		// second would cost another empty read of a socket transport).
		return waitLoop(ctx, cq, ch, wc, false)
	}
	start := time.Now()
	r, polls, err := spinThenWait(ctx, done, cq, ch, wc, start)
	if err == nil {
		d := time.Since(start)
		cq.WaitTook(d, verbs.SpinResultOf(polls, d))
	}
	return r, err
}

// spinThenWait is waitComp's spin and sleep on ch; polls > 0 is how many
// polls of the spin it took to find the completion.
func spinThenWait(ctx context.Context, done <-chan struct{}, cq *verbs.CQ, ch *verbs.CompChannel, wc *[1]verbs.WC, start time.Time) (r verbs.WC, polls int, err error) {
	if spin := cq.SpinFor(); spin > 0 {
		// Polling, not arming: a transport in polled mode stays in it, and
		// a completion due within the spin comes with no wake-up.
		for i := 1; ; i++ {
			if n, err := cq.Poll(wc[:]); err != nil || n == 1 {
				return wc[0], i, err
			}
			if i%16 == 0 {
				if ctx.Err() != nil || isClosed(done) || time.Since(start) > spin {
					break
				}
				if i%64 == 0 {
					runtime.Gosched() // the transport's goroutines may need this CPU
				}
			}
		}
	}
	// The spin's last poll, or waitComp's, was the last look: another
	// before arming would cost an empty poll (a system call on a socket
	// transport) and could find nothing that the poll after arming does
	// not.
	r, err = waitLoop(ctx, cq, ch, wc, false)
	return r, 0, err
}

// waitLoop sleeps until a completion of cq is there and takes it; look
// false skips the first poll before arming or CQ.Wait (the caller just
// polled).
func waitLoop(ctx context.Context, cq *verbs.CQ, ch *verbs.CompChannel, wc *[1]verbs.WC, look bool) (verbs.WC, error) {
	for ; ; look = true {
		if look {
			if n, err := cq.Poll(wc[:]); err != nil || n == 1 {
				return wc[0], err
			}
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

// isClosed reports whether done is closed.
func isClosed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
