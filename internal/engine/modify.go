package engine

import (
	"fmt"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The transitions of the InfiniBand QP state machine for the QP types the
// engine has, with the attributes each requires and allows (IBA 11.2.4.2;
// the same table as the kernel's ib_modify_qp_is_ok).
type transition struct {
	req, opt [2]verbs.QPAttrMask // [RC, UD]
}

const (
	mPKey    = verbs.QPAttrPKeyIndex
	mPort    = verbs.QPAttrPort
	mAccess  = verbs.QPAttrAccessFlags
	mQKey    = verbs.QPAttrQKey
	mCur     = verbs.QPAttrCurState
	mAlt     = verbs.QPAttrAltPath
	mMig     = verbs.QPAttrPathMigState
	mRnrT    = verbs.QPAttrMinRNRTimer
	rtsOptRC = mCur | mAccess | mAlt | mMig | mRnrT
	rtsOptUD = mCur | mQKey
)

var transitions = map[[2]verbs.QPState]transition{
	{verbs.QPSReset, verbs.QPSReset}: {},
	{verbs.QPSReset, verbs.QPSInit}:  {req: [2]verbs.QPAttrMask{mPKey | mPort | mAccess, mPKey | mPort | mQKey}},
	{verbs.QPSInit, verbs.QPSInit}:   {opt: [2]verbs.QPAttrMask{mPKey | mPort | mAccess, mPKey | mPort | mQKey}},
	{verbs.QPSInit, verbs.QPSRTR}: {
		req: [2]verbs.QPAttrMask{verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | mRnrT, 0},
		opt: [2]verbs.QPAttrMask{mAlt | mAccess | mPKey, mPKey | mQKey},
	},
	{verbs.QPSRTR, verbs.QPSRTS}: {
		req: [2]verbs.QPAttrMask{verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic, verbs.QPAttrSQPSN},
		opt: [2]verbs.QPAttrMask{rtsOptRC, rtsOptUD},
	},
	{verbs.QPSRTS, verbs.QPSRTS}: {opt: [2]verbs.QPAttrMask{rtsOptRC, rtsOptUD}},
	{verbs.QPSRTS, verbs.QPSSQD}: {opt: [2]verbs.QPAttrMask{verbs.QPAttrEnSQDAsyncNotify, verbs.QPAttrEnSQDAsyncNotify}},
	{verbs.QPSSQD, verbs.QPSRTS}: {opt: [2]verbs.QPAttrMask{rtsOptRC, rtsOptUD}},
	{verbs.QPSSQD, verbs.QPSSQD}: {opt: [2]verbs.QPAttrMask{
		verbs.QPAttrAV | mAlt | mAccess | mPKey | mRnrT | mMig | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic | verbs.QPAttrMaxDestRdAtomic | mPort,
		mPKey | mQKey}},
	{verbs.QPSSQE, verbs.QPSRTS}: {opt: [2]verbs.QPAttrMask{0, mCur | mQKey}},
}

func typeIndex(t verbs.QPType) int {
	if t == verbs.QPTUD {
		return 1
	}
	return 0
}

// checkModify validates a Modify against the state machine and the
// device's limits; q.mu is held.
func (q *QP) checkModify(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	from := q.state
	to := from
	if mask&verbs.QPAttrState != 0 {
		to = a.QPState
	}
	if mask&verbs.QPAttrCurState != 0 && a.CurQPState != from {
		return fmt.Errorf("%w: current state given as %v, the QP is in %v", verbs.ErrInvalid, a.CurQPState, from)
	}
	allowed := verbs.QPAttrState
	var req verbs.QPAttrMask
	switch {
	case to == verbs.QPSReset || to == verbs.QPSErr:
		allowed |= mCur
	default:
		t, ok := transitions[[2]verbs.QPState{from, to}]
		if !ok {
			return fmt.Errorf("%w: no transition from %v to %v", verbs.ErrInvalid, from, to)
		}
		ti := typeIndex(q.typ)
		req = t.req[ti]
		allowed |= t.req[ti] | t.opt[ti]
	}
	if extra := mask &^ allowed; extra != 0 {
		return fmt.Errorf("%w: attributes %v not allowed on %v %v->%v", verbs.ErrInvalid, extra, q.typ, from, to)
	}
	if missing := req &^ mask; missing != 0 {
		return fmt.Errorf("%w: %v %v->%v requires %v", verbs.ErrInvalid, q.typ, from, to, missing)
	}
	dev := &q.dev.cfg
	if mask&verbs.QPAttrPort != 0 && a.PortNum != 1 {
		return fmt.Errorf("%w: port %d (the device has port 1)", verbs.ErrInvalid, a.PortNum)
	}
	if mask&verbs.QPAttrPKeyIndex != 0 && int(a.PKeyIndex) >= max(dev.Attr.MaxPKeys, 1) {
		return fmt.Errorf("%w: P_Key index %d", verbs.ErrInvalid, a.PKeyIndex)
	}
	if mask&verbs.QPAttrPathMTU != 0 && (a.PathMTU < verbs.MTU256 || a.PathMTU > dev.Port.MaxMTU) {
		return fmt.Errorf("%w: path MTU %v (the port allows up to %v)", verbs.ErrInvalid, a.PathMTU, dev.Port.MaxMTU)
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > dev.Attr.MaxQPInitRdAtom {
		return fmt.Errorf("%w: max_rd_atomic %d exceeds the device's %d", verbs.ErrInvalid, a.MaxRdAtomic, dev.Attr.MaxQPInitRdAtom)
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > dev.Attr.MaxQPRdAtom {
		return fmt.Errorf("%w: max_dest_rd_atomic %d exceeds the device's %d", verbs.ErrInvalid, a.MaxDestRdAtomic, dev.Attr.MaxQPRdAtom)
	}
	if mask&verbs.QPAttrAccessFlags != 0 && a.QPAccessFlags&^(verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessLocalWrite) != 0 {
		return fmt.Errorf("%w: QP access flags %v", verbs.ErrInvalid, a.QPAccessFlags)
	}
	if mask&(verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry) != 0 && (a.RetryCnt > 7 || a.RNRRetry > 7) {
		return fmt.Errorf("%w: retry counts are 3 bits (retry_cnt %d, rnr_retry %d)", verbs.ErrInvalid, a.RetryCnt, a.RNRRetry)
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return fmt.Errorf("%w: min_rnr_timer %d (5 bits)", verbs.ErrInvalid, a.MinRNRTimer)
	}
	if mask&verbs.QPAttrDestQPN != 0 && a.DestQPNum > 0xFFFFFF {
		return fmt.Errorf("%w: destination QP number %#x (24 bits)", verbs.ErrInvalid, a.DestQPNum)
	}
	return nil
}

// Modify implements driver.QP.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	from := q.state
	if err := q.checkModify(attr, mask); err != nil {
		q.mu.Unlock()
		return err
	}
	to := from
	if mask&verbs.QPAttrState != 0 {
		to = attr.QPState
	}
	if err := q.cmOnly(from, to); err != nil {
		q.mu.Unlock()
		return err
	}
	t := q.t
	q.mu.Unlock()

	if err := t.Modify(attr, mask, from, to); err != nil {
		return err
	}

	q.mu.Lock()
	if q.state != from && to != verbs.QPSErr && to != verbs.QPSReset {
		// The QP changed state (an error) while the transport prepared the transition.
		now := q.state
		q.mu.Unlock()
		return fmt.Errorf("%w: QP moved from %v to %v during modify", verbs.ErrInvalidState, from, now)
	}
	q.applyAttr(attr, mask)
	switch to {
	case verbs.QPSReset:
		q.reset()
	case verbs.QPSErr:
		if q.state != verbs.QPSErr {
			q.enterErr()
		}
	case verbs.QPSSQD:
		if from != verbs.QPSSQD {
			q.setState(to)
			q.draining = true
			q.attr.SQDraining = true
			q.retire() // reports "drained" at once when nothing has begun and is not finished
		}
	default:
		q.setState(to)
		if to == verbs.QPSRTR || to == verbs.QPSRTS {
			q.attachProgress() // a QP that Modify connects (a transport from Config.NewTransport)
		}
	}
	q.mu.Unlock()
	if to == verbs.QPSRTS {
		q.progress()
	}
	return nil
}

func (q *QP) applyAttr(a *verbs.QPAttr, m verbs.QPAttrMask) {
	t := &q.attr
	if m&verbs.QPAttrEnSQDAsyncNotify != 0 {
		t.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if m&verbs.QPAttrAccessFlags != 0 {
		t.QPAccessFlags = a.QPAccessFlags
		q.aaccess.Store(uint32(a.QPAccessFlags))
	}
	if m&verbs.QPAttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if m&verbs.QPAttrPort != 0 {
		t.PortNum = a.PortNum
	}
	if m&verbs.QPAttrQKey != 0 {
		t.QKey = a.QKey
	}
	if m&verbs.QPAttrAV != 0 {
		t.AHAttr = a.AHAttr
	}
	if m&verbs.QPAttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
	}
	if m&verbs.QPAttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if m&verbs.QPAttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
	}
	if m&verbs.QPAttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
	}
	if m&verbs.QPAttrRQPSN != 0 {
		t.RQPSN = a.RQPSN
	}
	if m&verbs.QPAttrMaxQPRdAtomic != 0 {
		t.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&verbs.QPAttrAltPath != 0 {
		t.AltAHAttr, t.AltPKeyIndex, t.AltPortNum, t.AltTimeout = a.AltAHAttr, a.AltPKeyIndex, a.AltPortNum, a.AltTimeout
	}
	if m&verbs.QPAttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if m&verbs.QPAttrSQPSN != 0 {
		t.SQPSN = a.SQPSN
	}
	if m&verbs.QPAttrMaxDestRdAtomic != 0 {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
		q.aird.Store(uint32(a.MaxDestRdAtomic))
	}
	if m&verbs.QPAttrDestQPN != 0 {
		t.DestQPNum = a.DestQPNum
		q.adest.Store(a.DestQPNum)
	}
}

// reset discards all work without completions; q.mu is held.
func (q *QP) reset() {
	q.setState(verbs.QPSReset)
	q.stalled.Store(false)
	q.draining = false
	q.rdOut = 0
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := &q.sq.ring[i&q.sq.mask]
		w.state, w.Data = wqeDone, nil
	}
	q.sq.head, q.sq.next, q.sq.sent = q.sq.tail, q.sq.tail, q.sq.tail
	q.rqMu.Lock()
	q.rq.head = q.rq.tail
	q.rxTaken = false
	q.rqMu.Unlock()
	q.attr = verbs.QPAttr{}
	q.adest.Store(0)
	q.aaccess.Store(0)
	q.aird.Store(0)
	q.t.Shutdown(false)
	q.detach()
}

// fail moves the QP to ERR (Endpoint.Fail, Endpoint.Fatal).
func (q *QP) fail(ev *verbs.EventType) {
	q.mu.Lock()
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset || q.destroyed {
		q.mu.Unlock()
		return
	}
	q.enterErr()
	q.mu.Unlock()
	if ev != nil {
		q.ctx.raise(verbs.AsyncEvent{Type: *ev, QP: q.v})
	}
}

// enterErr moves the QP to ERR: every request not being transmitted now
// completes with WR_FLUSH_ERR, and so does every posted receive; q.mu is held.
func (q *QP) enterErr() {
	q.rqMu.Lock()
	q.setState(verbs.QPSErr) // under rqMu too, so that PostRecv sees ERR or gets flushed here
	if q.rxTaken {
		// A message was being received into it: it is the oldest receive.
		q.rxTaken = false
		wc := verbs.WC{WRID: q.rx.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		q.countRecv(wc.Status, 0)
		q.rcq.push(&wc, false)
	}
	if q.srq == nil {
		q.flushRecv()
	}
	q.rqMu.Unlock()
	q.stalled.Store(false)
	q.draining = false
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := &q.sq.ring[i&q.sq.mask]
		switch w.state {
		case wqeQueued, wqePending:
			w.state, w.status = wqeDone, verbs.WCWRFlushErr
			if w.rdAtomic {
				w.rdAtomic = false
				q.rdOut--
			}
		}
	}
	q.sq.next = q.sq.tail
	q.retire()
	if q.srq != nil {
		q.ctx.raise(verbs.AsyncEvent{Type: verbs.EventQPLastWQEReached, QP: q.v})
	}
	q.t.Shutdown(false)
	q.detach()
}

// rnrMicros is the IBA table of min_rnr_timer codes, in microseconds.
var rnrMicros = [32]int{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}

// RNRDelay returns the delay a min_rnr_timer code stands for (IBA table).
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrMicros[code&31]) * time.Microsecond
}
