package engine

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

type rqe struct {
	wrid uint64
	sge  []verbs.SGE
}

type recvQueue struct {
	ring       []rqe
	mask       uint64
	head, tail uint64
	max        int
}

func newRecvQueue(maxWR, maxSGE int) recvQueue {
	n := pow2(maxWR)
	rq := recvQueue{ring: make([]rqe, n), mask: uint64(n - 1), max: maxWR}
	for i := range rq.ring {
		rq.ring[i].sge = make([]verbs.SGE, 0, maxSGE)
	}
	return rq
}

// post checks wr against the queue's limits and appends it; what names the
// queue and its limits in errors.
func (rq *recvQueue) post(wr *verbs.RecvWR, maxSGE int, what string) error {
	if len(wr.SGList) > maxSGE {
		return fmt.Errorf("%w: %d SGEs, the %s allows %d", verbs.ErrInvalid, len(wr.SGList), what, maxSGE)
	}
	if rq.tail-rq.head >= uint64(rq.max) {
		return fmt.Errorf("%w: the %s holds %d requests", verbs.ErrQueueFull, what, rq.max)
	}
	r := &rq.ring[rq.tail&rq.mask]
	r.wrid = wr.WRID
	if len(wr.SGList) <= cap(r.sge) {
		// Element by element into the slot's own array: for the usual one
		// or two SGEs, the call to memmove that append or copy makes costs
		// more than the copy.
		r.sge = r.sge[:len(wr.SGList)]
		//lint:ignore S1001 copy calls memmove; see above
		for i, s := range wr.SGList {
			r.sge[i] = s
		}
	} else {
		r.sge = append(r.sge[:0], wr.SGList...)
	}
	rq.tail++
	return nil
}

// PostRecv implements driver.QP. It takes only the receive-queue lock,
// so posting receives never waits for a transmitting sender.
func (q *QP) PostRecv(wrs []verbs.RecvWR) error {
	if q.srq != nil {
		return &verbs.PostError{Index: 0, Err: fmt.Errorf("%w: the QP uses an SRQ", verbs.ErrInvalid)}
	}
	var perr error
	posted := false
	q.rqMu.Lock()
	state := q.State()
	for i := range wrs {
		wr := &wrs[i]
		var err error
		switch {
		case q.dead.Load():
			err = verbs.ErrClosed
		case state == verbs.QPSReset:
			err = fmt.Errorf("%w: receive posted to a QP in RESET", verbs.ErrInvalidState)
		default:
			err = q.rq.post(wr, q.cap.MaxRecvSGE, "receive queue (max_recv_wr, max_recv_sge)")
		}
		if err != nil {
			perr = &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
			break
		}
		posted = true
	}
	if state == verbs.QPSErr {
		q.flushRecv()
		posted = false
	}
	q.rqMu.Unlock()
	if posted {
		q.t.RecvPosted()
	}
	return perr
}

func (q *QP) flushRecv() {
	for ; q.rq.head != q.rq.tail; q.rq.head++ {
		r := &q.rq.ring[q.rq.head&q.rq.mask]
		wc := verbs.WC{WRID: r.wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		q.countRecv(wc.Status, 0)
		q.rcq.push(&wc, false)
	}
}

// takeRecv is Responder.TakeRecv.
func (q *QP) takeRecv() (*RecvCtx, bool) {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.srq != nil {
		if !q.srq.take(&q.rx) {
			return nil, false
		}
		q.rxTaken = true
		return &q.rx, true
	}
	if q.rq.head == q.rq.tail {
		return nil, false
	}
	r := &q.rq.ring[q.rq.head&q.rq.mask]
	q.rx.WRID = r.wrid
	q.rx.SGE = append(q.rx.SGE[:0], r.sge...)
	q.rq.head++
	q.rxTaken = true
	return &q.rx, true
}

// deliverRecv is Responder.Deliver.
func (q *QP) deliverRecv(data []byte, wc *verbs.WC, solicited bool, ho *Handoff) (ok bool, st verbs.WCStatus) {
	q.rqMu.Lock()
	var sge []verbs.SGE
	if q.srq != nil {
		if !q.srq.take(&q.rx) {
			q.rqMu.Unlock()
			return false, verbs.WCSuccess
		}
		wc.WRID, sge = q.rx.WRID, q.rx.SGE
	} else {
		if q.rq.head == q.rq.tail {
			q.rqMu.Unlock()
			return false, verbs.WCSuccess
		}
		r := &q.rq.ring[q.rq.head&q.rq.mask]
		wc.WRID, sge = r.wrid, r.sge // the slot is not reused while rqMu is held
		q.rq.head++
	}
	n := 0
	if h := recvFaultHook.Get(); h != nil {
		st = q.askRecvFault(*h, wc.WRID)
	}
	for _, s := range sge {
		if s.Length == 0 || st != verbs.WCSuccess {
			continue
		}
		b, _, f := q.dev.resolveCached(&q.recvMR, s.LKey, q.pd, s.Addr, s.Length, verbs.AccessLocalWrite)
		if f != FaultNone {
			st = verbs.WCLocProtErr
			break
		}
		n += copyBytes(b, data[n:])
	}
	if st == verbs.WCSuccess && n < len(data) {
		st = verbs.WCLocLenErr
	}
	q.countRecv(st, uint32(n))
	q.rqMu.Unlock()
	wc.Status = st
	wc.QPNum = q.num
	if d := ho.take(q.rcq); d != nil {
		copyWC(d, wc)
		return true, st
	}
	q.rcq.push(wc, solicited)
	return true, st
}

// completeRecv is Responder.CompleteRecv (and CompleteRecvTo, with ho).
func (q *QP) completeRecv(rc *RecvCtx, wc *verbs.WC, solicited bool, ho *Handoff) {
	q.rqMu.Lock()
	taken := q.rxTaken
	q.rxTaken = false
	if taken {
		q.countRecv(wc.Status, wc.ByteLen)
	}
	q.rqMu.Unlock()
	if !taken {
		return
	}
	wc.WRID = rc.WRID
	wc.QPNum = q.num
	if d := ho.take(q.rcq); d != nil {
		copyWC(d, wc)
		return
	}
	q.rcq.push(wc, solicited)
}
