package engine

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

type wqeState uint8

const (
	wqeQueued  wqeState = iota // posted, not started
	wqeTx                      // inside Transport.Send
	wqePending                 // handed to the transport, waiting for Complete
	wqeDone                    // finished, waiting to be retired into the CQ
)

type sendQueue struct {
	ring             []WQE
	mask             uint64
	head, next, tail uint64 // retire, transmit, post positions
	// sent is one past the last request ever handed to Send. A request
	// below it that is queued again (RNR stall) has begun: SQD still
	// finishes it, and the queue is not drained before it is done.
	sent uint64
}

// What an opcode is, for the checks of a posted request (opClass).
const (
	opValid    = 1 << iota // a send opcode
	opRCOnly               // not on UD
	opNoSup                // the engine does not implement it
	opAtomic               // compare-and-swap, fetch-and-add: an 8-byte sink
	opRead                 // RDMA READ: SGE count against max_sge_rd
	opFlush                // FLUSH: no data
	opWrite8               // ATOMIC_WRITE: 8 bytes of data
	opNoInline             // no inline data
	opDirect               // PostSend may carry it out directly (DirectSender)
	opOneSided             // RDMA WRITE or READ: DirectSender.OneSided may carry it out
	opLocal                // BIND_MW, LOCAL_INV: carried out by the engine, nothing on the wire
)

var opClass = [16]uint16{
	verbs.WRSend:              opValid | opDirect,
	verbs.WRSendWithImm:       opValid | opDirect,
	verbs.WRRDMAWrite:         opValid | opRCOnly | opDirect | opOneSided,
	verbs.WRRDMARead:          opValid | opRCOnly | opRead | opNoInline | opDirect | opOneSided,
	verbs.WRRDMAWriteWithImm:  opValid | opRCOnly,
	verbs.WRSendWithInv:       opValid | opRCOnly,
	verbs.WRAtomicCmpAndSwp:   opValid | opRCOnly | opAtomic | opNoInline,
	verbs.WRAtomicFetchAndAdd: opValid | opRCOnly | opAtomic | opNoInline,
	verbs.WRFlush:             opValid | opRCOnly | opFlush | opNoInline,
	verbs.WRAtomicWrite:       opValid | opRCOnly | opWrite8,
	verbs.WRLocalInv:          opValid | opRCOnly | opNoInline | opLocal,
	verbs.WRBindMW:            opValid | opRCOnly | opNoInline | opLocal,
}

// PostSend implements driver.QP. The requests of a list on an idle QP
// whose transport is a DirectSender go out before PostSend returns, one
// after the other under one hold of the lock (postDirect), until one
// cannot; that one and the rest are queued and sent by progress.
func (q *QP) PostSend(wrs []verbs.SendWR) error {
	if len(wrs) == 1 && q.oneOps&(1<<(wrs[0].Opcode&31)) != 0 {
		if q.mu.td {
			// A thread domain's poster tries postOne without the lock
			// (qpLock), then, if it was held, with it.
			ok := q.mu.enter() && q.postOne(&wrs[0])
			q.mu.leave()
			if ok {
				return nil
			}
			q.mu.Lock()
		} else {
			// The mutex alone, not Lock: postOne changes none of the
			// gate's conditions, so the gate stays open for the next post.
			q.mu.mu.Lock()
		}
		if q.postOne(&wrs[0]) {
			q.mu.Unlock()
			return nil
		}
		q.mu.gate = 0 // what follows may change the gate's conditions
	} else {
		q.mu.Lock()
		if len(wrs) == 1 && (wrs[0].Opcode == verbs.WRSend || wrs[0].Opcode == verbs.WRSendWithImm) && q.postSendOne(&wrs[0]) {
			q.mu.Unlock()
			q.direct.DirectDone()
			return nil
		}
	}
	i, out, sent := 0, false, false
	var perr error
	// A fault or capture hook sees every request go out: no direct path.
	if q.direct != nil && faultHook.Get() == nil && captureHook.Get() == nil {
		var endOwed bool
		i, endOwed = q.postRun(wrs)
		out = i > 0
		for ; i < len(wrs); i++ {
			wr := &wrs[i]
			n, inline, err := q.check(wr)
			if err != nil {
				perr = &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
				break
			}
			f := q.postDirect(wr, n, inline, out, i == len(wrs)-1)
			if f&dirCalled != 0 {
				endOwed = f&dirEnded == 0
			}
			if f&dirPosted == 0 {
				if err := q.enqueue(wr, n, inline); err != nil {
					perr = &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
				}
				i++
				break
			}
			out = true
			sent = sent || f&dirSent != 0
		}
		if endOwed {
			q.direct.DirectEnd()
		}
		q.clearDsrc()
	}
	if perr == nil {
		for ; i < len(wrs); i++ {
			n, inline, err := q.check(&wrs[i])
			if err == nil {
				err = q.enqueue(&wrs[i], n, inline)
			}
			if err != nil {
				perr = &verbs.PostError{Index: i, WRID: wrs[i].WRID, Err: err}
				break
			}
		}
	}
	if q.sq.next != q.sq.tail || q.txActive {
		q.progressLocked()
	} else {
		q.mu.Unlock()
	}
	if sent {
		q.direct.DirectDone()
	}
	return perr
}

// check classifies a posted request: it returns its length and whether it
// is inline, or why it cannot be posted (the QP's state, the queue's and
// device's limits, the opcode's rules). It is the one check of a send
// request, for the direct path and the queued one alike; q.mu is held.
func (q *QP) check(wr *verbs.SendWR) (n uint64, inline bool, err error) {
	if q.destroyed {
		return 0, false, verbs.ErrClosed
	}
	if st := q.state; st != verbs.QPSRTS {
		switch {
		case st == verbs.QPSSQD || st == verbs.QPSErr:
		case st == verbs.QPSSQE && q.typ == verbs.QPTUD:
		case st == verbs.QPSSQE:
			return 0, false, fmt.Errorf("%w: QP is in %v", verbs.ErrInvalidState, st)
		default:
			return 0, false, fmt.Errorf("%w: send posted to a QP in %v (needs RTS)", verbs.ErrInvalidState, st)
		}
	}
	if q.sq.tail-q.sq.head >= uint64(q.cap.MaxSendWR) {
		return 0, false, fmt.Errorf("%w: send queue holds %d requests (max_send_wr)", verbs.ErrQueueFull, q.cap.MaxSendWR)
	}
	if len(wr.SGList) > q.cap.MaxSendSGE {
		return 0, false, fmt.Errorf("%w: %d SGEs, max_send_sge is %d", verbs.ErrInvalid, len(wr.SGList), q.cap.MaxSendSGE)
	}
	op := wr.Opcode
	var cls uint16
	if op < verbs.WROpcode(len(opClass)) {
		cls = opClass[op]
	}
	switch {
	case cls&opValid == 0:
		return 0, false, fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, op)
	case cls&opNoSup != 0:
		return 0, false, fmt.Errorf("%w: %v", verbs.ErrNotSupported, op)
	case q.deny.Load()&(1<<op) != 0:
		return 0, false, fmt.Errorf("%w: %v: the connected peer does not implement it", verbs.ErrNotSupported, op)
	}
	if q.typ == verbs.QPTUD {
		if err := q.checkUD(wr, cls); err != nil {
			return 0, false, err
		}
	}
	for _, s := range wr.SGList {
		n += uint64(s.Length)
	}
	inline = wr.Flags&verbs.SendInline != 0
	if inline && wr.Inline != nil {
		n = uint64(len(wr.Inline))
	}
	if op == verbs.WRBindMW {
		if err := q.checkBind(wr); err != nil {
			return 0, false, err
		}
	}
	if cls&(opAtomic|opRead|opFlush|opWrite8) != 0 {
		if err := q.checkOp(wr, cls, n, inline); err != nil {
			return 0, false, err
		}
	}
	if inline {
		if cls&opNoInline != 0 {
			return 0, false, fmt.Errorf("%w: inline %v", verbs.ErrInvalid, op)
		}
		if n > uint64(q.cap.MaxInlineData) {
			return 0, false, fmt.Errorf("%w: %d bytes inline, max_inline_data is %d", verbs.ErrInvalid, n, q.cap.MaxInlineData)
		}
	}
	if n > uint64(q.dev.cfg.Port.MaxMsgSz) {
		return 0, false, fmt.Errorf("%w: message of %d bytes, the port allows %d", verbs.ErrInvalid, n, q.dev.cfg.Port.MaxMsgSz)
	}
	return n, inline, nil
}

// checkUD is check's part for a UD QP.
func (q *QP) checkUD(wr *verbs.SendWR, cls uint16) error {
	if cls&opRCOnly != 0 {
		return fmt.Errorf("%w: %v on a UD QP", verbs.ErrInvalid, wr.Opcode)
	}
	if wr.AH == nil {
		return fmt.Errorf("%w: UD send without an address handle", verbs.ErrInvalid)
	}
	if ah, ok := ahOf(wr.AH); !ok || ah.pd != q.pd || ah.dead.Load() {
		return fmt.Errorf("%w: address handle of another protection domain, or destroyed", verbs.ErrInvalid)
	}
	return nil
}

// checkOp is check's part for the opcodes with rules of their own.
func (q *QP) checkOp(wr *verbs.SendWR, cls uint16, n uint64, inline bool) error {
	a := &q.dev.cfg.Attr
	switch {
	case cls&opAtomic != 0:
		if a.AtomicCap == verbs.AtomicNone {
			return fmt.Errorf("%w: the device has no atomic operations", verbs.ErrNotSupported)
		}
		if n != 8 {
			return fmt.Errorf("%w: atomic result buffer of %d bytes (must be 8)", verbs.ErrInvalid, n)
		}
	case cls&opFlush != 0:
		if len(wr.SGList) != 0 || (inline && len(wr.Inline) != 0) {
			return fmt.Errorf("%w: FLUSH carries no data", verbs.ErrInvalid)
		}
		if wr.FlushType != verbs.FlushGlobal && wr.FlushType != verbs.FlushPersistent {
			return fmt.Errorf("%w: flush type %v", verbs.ErrInvalid, wr.FlushType)
		}
		if need := flushCap(wr.FlushType); a.DeviceCapFlagsEx&need == 0 {
			return fmt.Errorf("%w: FLUSH of type %v: the device has no %s", verbs.ErrNotSupported, wr.FlushType, capName(need))
		}
	case cls&opWrite8 != 0:
		if a.DeviceCapFlagsEx&verbs.DeviceAtomicWrite == 0 {
			return fmt.Errorf("%w: the device has no ATOMIC_WRITE", verbs.ErrNotSupported)
		}
		if n != 8 {
			return fmt.Errorf("%w: ATOMIC_WRITE of %d bytes (must be 8)", verbs.ErrInvalid, n)
		}
	case cls&opRead != 0:
		if len(wr.SGList) > a.MaxSGERd {
			return fmt.Errorf("%w: %d SGEs on an RDMA read, the device allows %d", verbs.ErrInvalid, len(wr.SGList), a.MaxSGERd)
		}
	}
	return nil
}

// enqueue queues a checked request of n bytes; q.mu is held.
func (q *QP) enqueue(wr *verbs.SendWR, n uint64, inline bool) error {
	w := &q.sq.ring[q.sq.tail&q.sq.mask]
	if err := q.fillWQE(w, wr, n, inline); err != nil {
		return err
	}
	if q.state == verbs.QPSErr {
		w.state, w.status = wqeDone, verbs.WCWRFlushErr
	}
	q.sq.tail++
	return nil
}

// fillWQE copies wr, of n bytes, into the send queue slot w (at the queue's
// tail); q.mu is held.
func (q *QP) fillWQE(w *WQE, wr *verbs.SendWR, n uint64, inline bool) error {
	resetWQE(w, wr, n)
	w.seq, w.state = q.sq.tail, wqeQueued
	w.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
	if wr.Opcode == verbs.WRBindMW {
		// Read now, as the caller may reuse it; the window's key is the
		// new one from now on (libibverbs updates mw->rkey at the post).
		w.bind = *wr.BindMW
		w.WR.BindMW = &w.bind
		if mw, ok := mwOf(w.bind.MW); ok {
			mw.rkey.Store(w.bind.RKey)
		}
	}
	if inline {
		// The data is copied now: the caller may reuse its buffers when PostSend returns.
		if wr.Inline != nil {
			w.inl = append(w.inl, wr.Inline...)
		} else {
			for _, s := range wr.SGList {
				b, _, f := q.dev.resolveCached(&q.sendMR, s.LKey, q.pd, s.Addr, s.Length, 0)
				if f != FaultNone && s.Length > 0 {
					return fmt.Errorf("%w: inline SGE (%#x, %d, lkey %#x): %v", verbs.ErrInvalid, s.Addr, s.Length, s.LKey, f)
				}
				w.inl = append(w.inl, b...)
			}
		}
		w.WR.Inline = w.inl
		w.WR.SGList = nil
	} else {
		w.sge = append(w.sge, wr.SGList...)
		w.WR.SGList = w.sge
		w.WR.Inline = nil
	}
	return nil
}

// fillSent is fillWQE for a request postDirect put out: its payload is on
// the wire already and such a request is never transmitted again, so its
// WQE keeps what its completion needs and no copy of the data or the SGEs
// (resolving and copying inline data again was a tenth of a message's CPU).
func (q *QP) fillSent(w *WQE, wr *verbs.SendWR, n uint64) {
	resetWQE(w, wr, n)
	w.WR.SGList, w.WR.Inline = nil, nil
}

// resetWQE gives the slot w the request wr, of n bytes, with none of its
// previous request's state. Field by field: a whole-struct literal costs a
// typed copy of a pointerful struct on every post (measured: 7% of a
// message's CPU).
func resetWQE(w *WQE, wr *verbs.SendWR, n uint64) {
	w.WR = *wr
	w.Len, w.Retries, w.Data = uint32(n), 0, nil
	w.status = verbs.WCSuccess
	w.rdAtomic, w.early, w.earlySt = false, false, verbs.WCSuccess
	w.asked, w.fault, w.capd = false, verbs.WCSuccess, false
	w.sge, w.inl = w.sge[:0], w.inl[:0]
}

// postOne is PostSend's path for the commonest request posted alone: an
// RDMA WRITE or READ of one segment that the transport carries out at
// once (DirectSender.OneSided) on an idle queue. It reports whether the
// request was posted and is complete; otherwise nothing changed, and
// PostSend's general path takes it. Kept apart from the list's loop so
// that the request pays for none of the list's bookkeeping; q.mu is held,
// or a thread domain's poster is inside its section (qpLock.enter).
//
// What does not change from one post to the next (the QP's state, an
// idle queue, the peer's opcodes, the send region's protection domain
// and rights) is looked at once and remembered in the lock's gate
// (openGate) until the lock is next taken: the request's own fields,
// the hooks and the region's validity and bounds are all a post checks.
// The ~25 conditions of check's that cannot fail for such a request,
// each made on every post, were a third of the instructions of an 8-byte
// WRITE's post.
func (q *QP) postOne(wr *verbs.SendWR) bool {
	op := wr.Opcode & 31
	if q.mu.gate&(1<<op) == 0 && !q.openGate(op) {
		return false
	}
	if len(wr.SGList) != 1 || wr.Flags&(verbs.SendInline|verbs.SendFence) != 0 || faultHook.Get() != nil || captureHook.Get() != nil {
		return false
	}
	// oneSided's work, in line. The bounds without a sum that can
	// overflow: an address below the region's wraps to an offset past
	// it, and n-1 catches n == 0.
	s, mr := &wr.SGList[0], q.sendMR
	n, off, buf := uint64(s.Length), s.Addr-mr.addr, mr.buf
	if s.LKey != mr.key || n-1 >= uint64(q.maxMsg) || off > uint64(len(buf)) || n > uint64(len(buf))-off || !mr.valid.Load() {
		return false
	}
	if !q.direct.OneSided(wr, buf[off:off+n:off+n], true) {
		return false
	}
	c := &q.cnt.Sent[op&15]
	c.Msgs++
	c.Bytes += n
	if q.sigAll || wr.Flags&verbs.SendSignaled != 0 {
		q.pushDirect(wr, n)
	}
	return true
}

// openGate makes postOne's checks of the QP for op, and opens the gate
// for the opcodes that pass them all (as postRun's do for a list); it
// reports whether op is one. A READ's sink must allow local writes.
func (q *QP) openGate(op verbs.WROpcode) bool {
	if q.direct == nil || q.state != verbs.QPSRTS || q.txActive || q.sq.next != q.sq.tail || q.sq.head != q.sq.tail || q.stalled.Load() {
		return false
	}
	mr := q.sendMR
	if mr == nil || mr.pd != q.pd {
		return false
	}
	ops := q.oneOps &^ q.deny.Load()
	if mr.access&verbs.AccessLocalWrite == 0 {
		ops &^= 1 << verbs.WRRDMARead
	}
	q.mu.gate = ops
	return ops&(1<<op) != 0
}

// postSendOne is PostSend's path for a SEND (or SEND WITH IMMEDIATE)
// posted alone, of one segment in the send region or of inline data,
// that the transport puts out at once (DirectSender.SendDirect) behind
// nothing queued: postDirect's work without check's general switch, the
// segment list and the list's loop (together some 350 instructions of an
// 8-byte SEND's post, a third). It reports whether the request was
// posted; DirectEnd is not owed, DirectDone is. Otherwise nothing
// changed and the general path takes the request (and reports what is
// wrong with it); q.mu is held.
func (q *QP) postSendOne(wr *verbs.SendWR) bool {
	if q.direct == nil || q.state != verbs.QPSRTS || q.typ != verbs.QPTRC || q.txActive || q.sq.next != q.sq.tail || q.stalled.Load() ||
		q.sq.tail-q.sq.head >= uint64(q.cap.MaxSendWR) || len(wr.SGList) > q.cap.MaxSendSGE ||
		wr.Flags&verbs.SendFence != 0 || q.deny.Load()&(1<<wr.Opcode) != 0 || faultHook.Get() != nil || captureHook.Get() != nil {
		return false
	}
	var src []byte
	if wr.Flags&verbs.SendInline != 0 && wr.Inline != nil {
		src = wr.Inline
	} else if len(wr.SGList) == 1 {
		// The bounds as postOne's; a zero length goes the general path.
		s, mr := &wr.SGList[0], q.sendMR
		if mr == nil {
			return false
		}
		n, off, buf := uint64(s.Length), s.Addr-mr.addr, mr.buf
		if s.LKey != mr.key || n == 0 || off > uint64(len(buf)) || n > uint64(len(buf))-off || !mr.valid.Load() || mr.pd != q.pd {
			return false
		}
		src = buf[off : off+n : off+n]
	} else {
		return false
	}
	n := uint64(len(src))
	if n > uint64(q.maxMsg) || wr.Flags&verbs.SendInline != 0 && n > uint64(q.cap.MaxInlineData) {
		return false
	}
	w := &q.sq.ring[q.sq.tail&q.sq.mask]
	w.seq = q.sq.tail
	w.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
	q.one[0] = src
	ok, done := q.direct.SendDirect(w, wr, q.one[:], uint32(n))
	q.one[0] = nil
	// No DirectEnd: a SEND's SendDirect sets up nothing for it to end (an
	// interface call, some twenty instructions of an 8-byte SEND).
	if !ok {
		return false
	}
	if done && q.sq.head == q.sq.tail {
		q.completeDirect(wr, n) // as postDirect
		return true
	}
	q.queueSent(w, wr, n, done)
	return true
}

// postRun is postOne for a list: it carries out the list's leading run of
// requests that postOne would take, and returns how many it did (the rest
// go PostSend's general path) and whether DirectEnd is owed (the
// transport was called); q.mu is held, the direct path is free of hooks,
// and the transport is a DirectSender.
//
// What does not change from one request of the list to the next (the
// QP's state, an idle queue, the peer's opcodes, the local region) is
// looked at once; each request is checked only for what is its own
// (opcode, flags, its segment's bounds), and, when the transport lends
// lanes (LaneSender), the request is carried out here, on the lane of its
// remote region. Going through check, postDirect and OneSided for each, a
// request of a list of 8-byte WRITEs cost more instructions than one
// posted alone (406 against 390): check and postDirect's bookkeeping
// were half of them, the call into the transport and its checks most of
// the rest.
func (q *QP) postRun(wrs []verbs.SendWR) (int, bool) {
	// A list that does not begin with a WRITE or READ (a SEND's) pays
	// for none of the run's set-up: it was some ninety instructions.
	if len(wrs) == 0 || q.oneOps&(1<<(wrs[0].Opcode&31)) == 0 || q.state != verbs.QPSRTS || q.txActive || q.sq.next != q.sq.tail || q.sq.head != q.sq.tail || q.stalled.Load() {
		return 0, false
	}
	mr := q.sendMR
	if mr == nil || !mr.valid.Load() || mr.pd != q.pd {
		return 0, false
	}
	ops := q.oneOps &^ q.deny.Load()
	if mr.access&verbs.AccessLocalWrite == 0 {
		ops &^= 1 << verbs.WRRDMARead // its sink must allow local writes
	}
	maxMsg, key, base, buf := uint64(q.maxMsg), mr.key, mr.addr, mr.buf
	// What the lane lends, in locals: rkey and the remote accesses (none
	// until a lane is open), its addresses and the largest request.
	var lane *Lane
	lkey, lneed, lbase, lmax, lmem := uint32(0), verbs.AccessFlags(0), uint64(0), uint64(0), []byte(nil)
	called := false
	for i := range wrs {
		wr := &wrs[i]
		op := wr.Opcode & 31
		if ops&(1<<op) == 0 || len(wr.SGList) != 1 || wr.Flags&(verbs.SendInline|verbs.SendFence) != 0 {
			return i, called
		}
		s := &wr.SGList[0]
		// Bounds without a sum that can overflow; an address below the
		// region's wraps to an offset past it. n-1 catches n == 0.
		n, off := uint64(s.Length), s.Addr-base
		if s.LKey != key || n-1 >= maxMsg || off > uint64(len(buf)) || n > uint64(len(buf))-off {
			return i, called
		}
		local := buf[off : off+n : off+n]
		rneed := verbs.AccessRemoteWrite
		if op == verbs.WRRDMARead {
			rneed = verbs.AccessRemoteRead
		}
		onLane := wr.RKey == lkey && lneed&rneed != 0
		if !onLane && q.lanes != nil {
			called = true
			if lane = q.lanes.OpenLane(wr.RKey, rneed); lane != nil {
				lkey, lneed, lbase, lmax, lmem = lane.RKey, lane.Need, lane.Base, uint64(lane.Max), lane.Mem
				onLane = true // OpenLane's lane allows rneed
			} else {
				lneed = 0
			}
		}
		if roff := wr.RemoteAddr - lbase; onLane && n <= lmax && roff <= uint64(len(lmem)) && n <= uint64(len(lmem))-roff {
			if lane.Hook != nil {
				lane.Hook()
			}
			if rneed == verbs.AccessRemoteRead {
				copyBytes(local, lmem[roff:roff+n:roff+n])
			} else {
				copyBytes(lmem[roff:roff+n:roff+n], local)
			}
			lane.N++
		} else {
			called = true
			if !q.direct.OneSided(wr, local, false) {
				return i, true
			}
			lneed = 0 // OneSided may have changed the lane
		}
		c := &q.cnt.Sent[op&15]
		c.Msgs++
		c.Bytes += n
		if q.sigAll || wr.Flags&verbs.SendSignaled != 0 {
			q.pushDirect(wr, n)
		}
	}
	return len(wrs), called
}

// What postDirect did (a set of flags).
const (
	dirPosted = 1 << iota // the request was posted (else nothing changed: it is to be queued)
	dirCalled             // the transport was called
	dirEnded              // ... and did DirectEnd's work itself (OneSided with last)
	dirSent               // SendDirect put it out (DirectDone is owed)
)

// postDirect tries the direct path for wr, checked already, of n bytes (see
// DirectSender); q.mu is held. It reports what it did (dirPosted, ...);
// last says that wr is the last request of its PostSend.
//
// again says that the request before it in the list went out this way:
// the QP's conditions for the path (state, type, an idle queue) still
// hold, since nothing but postDirect ran under the lock meanwhile.
func (q *QP) postDirect(wr *verbs.SendWR, n uint64, inline, again, last bool) int {
	if !again && (q.state != verbs.QPSRTS || q.typ != verbs.QPTRC || q.txActive || q.sq.next != q.sq.tail || q.stalled.Load()) ||
		opClass[wr.Opcode]&opDirect == 0 || wr.Flags&verbs.SendFence != 0 && q.rdOut > 0 {
		return 0
	}
	if opClass[wr.Opcode]&opOneSided != 0 && len(wr.SGList) == 1 && !inline && q.sq.head == q.sq.tail {
		if f := q.oneSided(wr, n, last); f != 0 {
			return f
		}
	}
	src, st := q.dsrc[:0], verbs.WCSuccess
	if inline && wr.Inline != nil {
		if n > 0 {
			src = append(src, wr.Inline)
		}
	} else {
		need := verbs.AccessFlags(0)
		if wr.Opcode == verbs.WRRDMARead {
			need = verbs.AccessLocalWrite // the sink
		}
		src, st = q.segments(&q.sendMR, wr.SGList, src, need)
	}
	w := &q.sq.ring[q.sq.tail&q.sq.mask]
	ok := st == verbs.WCSuccess // a bad key goes the queued path, which reports it
	done, called := false, false
	if ok {
		w.seq = q.sq.tail
		w.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
		ok, done = q.direct.SendDirect(w, wr, src, uint32(n))
		called = true
	}
	// Cleared by PostSend (clearDsrc); stored back only when append grew
	// it (a slice store has a write barrier).
	if cap(src) != cap(q.dsrc) {
		q.dsrc = src[:0]
	}
	q.dsrcUsed = max(q.dsrcUsed, len(src))
	if !ok {
		if called {
			return dirCalled
		}
		return 0
	}
	if done && q.sq.head == q.sq.tail {
		// Complete already, and nothing before it waits to be retired:
		// its completion is made now, and it never enters the queue. Its
		// slot and sequence number go to the next request: no transport
		// refers to a request it carried out (Complete is for Pending
		// ones), and the slot stays in the cache (a WRITE's bookkeeping,
		// a slot of its own each, was a fifth of its CPU).
		q.completeDirect(wr, n)
		return dirPosted | dirCalled | dirSent
	}
	q.queueSent(w, wr, n, done)
	return dirPosted | dirCalled | dirSent
}

// queueSent enters w, which the transport took directly (done: and
// finished), into the send queue as sent, and retires it if done, in
// order: behind requests still pending.
func (q *QP) queueSent(w *WQE, wr *verbs.SendWR, n uint64, done bool) {
	q.fillSent(w, wr, n)
	w.state = wqePending
	if done {
		w.state = wqeDone
	}
	q.sq.tail++
	q.sq.next = q.sq.tail
	q.sq.sent = max(q.sq.sent, q.sq.next)
	if done {
		q.retire()
	}
}

// oneSided is postDirect for a WRITE or READ of one segment, not inline,
// of n bytes, on an idle queue (nothing to retire before it): the segment
// is resolved when it lies in the region the last one did (q.sendMR), the
// common case, without the list segments appends to (a slice of slices
// that PostSend would clear, a call into the write barriers), and the
// transport's OneSided carries it out; its completion is made at once and
// it never enters the queue. It returns postDirect's flags, 0 when the
// segment is not resolved so (a zero length included): postDirect's
// general path then takes it.
func (q *QP) oneSided(wr *verbs.SendWR, n uint64, last bool) int {
	s := &wr.SGList[0]
	need := verbs.AccessFlags(0)
	if wr.Opcode == verbs.WRRDMARead {
		need = verbs.AccessLocalWrite
	}
	mr := q.sendMR
	if mr == nil || mr.key != s.LKey || s.Length == 0 || !mr.valid.Load() || mr.pd != q.pd || mr.access&need != need ||
		s.Addr < mr.addr || s.Addr-mr.addr > uint64(len(mr.buf)) || uint64(s.Length) > uint64(len(mr.buf))-(s.Addr-mr.addr) {
		return 0
	}
	off := s.Addr - mr.addr
	f := dirCalled
	if last {
		f |= dirEnded
	}
	if !q.direct.OneSided(wr, mr.buf[off:off+uint64(s.Length):off+uint64(s.Length)], last) {
		return f
	}
	c := &q.cnt.Sent[wr.Opcode&15] // completeDirect's, in line
	c.Msgs++
	c.Bytes += n
	if q.sigAll || wr.Flags&verbs.SendSignaled != 0 {
		q.pushDirect(wr, n)
	}
	return f | dirPosted
}

// completeDirect accounts for a request of n bytes that the transport
// carried out from PostSend, with nothing before it to retire: its
// completion is made now, and it never enters the queue (see postDirect).
func (q *QP) completeDirect(wr *verbs.SendWR, n uint64) {
	c := &q.cnt.Sent[wr.Opcode&15] // countSend's, as retire would
	c.Msgs++
	c.Bytes += n
	if q.sigAll || wr.Flags&verbs.SendSignaled != 0 {
		q.pushDirect(wr, n)
	}
}

// pushDirect is completeDirect's completion of a signaled request.
func (q *QP) pushDirect(wr *verbs.SendWR, n uint64) {
	wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCSuccess, Opcode: wr.Opcode.WCOpcode(), QPNum: q.num}
	if wr.Opcode == verbs.WRRDMARead {
		wc.ByteLen = uint32(n)
	}
	q.scq.push(&wc, false)
}

// clearDsrc drops postDirect's references to the caller's memory, once
// per PostSend (not per request: clearing a slice of slices is a call into
// the runtime's write barriers).
func (q *QP) clearDsrc() {
	if q.dsrcUsed > 0 {
		clear(q.dsrc[:q.dsrcUsed])
		q.dsrcUsed = 0
	}
}

// progress transmits queued requests. Whoever finds the transmitter idle
// becomes it and drains the queue; other posters only enqueue. So requests
// leave in order, no goroutine waits for another, and a transport may call back
// into the engine (even for this QP) from Send.
func (q *QP) progress() {
	q.mu.Lock()
	q.progressLocked()
}

// progressLocked is progress entered with q.mu held (PostSend goes on
// without letting go of the lock); it returns with q.mu released.
func (q *QP) progressLocked() {
	if q.txActive {
		q.mu.Unlock()
		return
	}
	q.txActive = true
	owed := false // a Send was told More, and neither Send nor Flush followed
	for {
		w := q.nextTx()
		if w == nil {
			if owed {
				owed = false
				q.mu.Unlock()
				q.batch.Flush()
				q.mu.Lock()
				continue // (anything posted meanwhile waits for this loop)
			}
			break
		}
		w.state = wqeTx
		if opClass[w.WR.Opcode&15]&opLocal != 0 {
			// Unlocked, as a transport's Send is: a bind revokes the
			// window's old binding, which may wait for a peer's direct
			// accesses (shm).
			seq := w.seq
			q.mu.Unlock()
			st := q.local(w)
			q.mu.Lock()
			q.txResult(w, seq, 0, Result{Outcome: Done, Status: st})
			q.retire()
			continue
		}
		if h := faultHook.Get(); h != nil && !w.asked && !q.askFault(*h, w) {
			q.retire()
			continue
		}
		if h := captureHook.Get(); h != nil {
			q.capture(*h, w, false)
		}
		w.more = q.batch != nil && q.moreAfter(w)
		owed = w.more
		seq, kicks := w.seq, q.kicks.Load()
		q.mu.Unlock()
		res := q.t.Send(w)
		q.mu.Lock()
		q.txResult(w, seq, kicks, res)
		q.retire()
	}
	q.txActive = false
	q.retire()
	ev := q.faultEv
	q.faultEv = 0
	q.mu.Unlock()
	if ev != 0 {
		q.ctx.raise(verbs.AsyncEvent{Type: ev, QP: q.v})
	}
}

// isRdAtomic reports whether op waits for a response from the target, and
// so counts against ORD/IRD: reads, atomics, and (as in IBTA 1.5) flush and
// atomic write.
func isRdAtomic(op verbs.WROpcode) bool {
	return op == verbs.WRRDMARead || op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd ||
		op == verbs.WRFlush || op == verbs.WRAtomicWrite
}

// nextTx returns the next request to transmit, honouring the state, RNR
// stalls, fences and the ORD limit; q.mu is held. In SQD only a request
// that has begun (one an RNR sent back to the queue) goes on.
func (q *QP) nextTx() *WQE {
	if q.stalled.Load() || q.sq.next == q.sq.tail {
		return nil
	}
	if !q.sendsNew() && (q.state != verbs.QPSSQD || q.sq.next >= q.sq.sent) {
		return nil
	}
	w := &q.sq.ring[q.sq.next&q.sq.mask]
	if !q.mayGo(w, q.rdOut) {
		return nil
	}
	q.sq.next++
	q.sq.sent = max(q.sq.sent, q.sq.next)
	return w
}

// sendsNew reports whether the QP's state lets requests not yet begun go
// out: RTS, or SQE for UD; q.mu is held.
func (q *QP) sendsNew() bool {
	return q.state == verbs.QPSRTS || q.state == verbs.QPSSQE && q.typ == verbs.QPTUD
}

// mayGo reports whether w, the next request to send, may go with rd reads
// and atomics outstanding: a fenced request waits for them, and ORD bounds
// them; q.mu is held.
func (q *QP) mayGo(w *WQE, rd int) bool {
	if w.WR.Flags&verbs.SendFence != 0 && rd > 0 {
		return false
	}
	return !isRdAtomic(w.WR.Opcode) || q.attr.MaxRdAtomic == 0 || rd < int(q.attr.MaxRdAtomic)
}

// moreAfter reports whether the request queued after w, just taken by
// nextTx, could be sent right after it by nextTx's rules, w counted
// against ORD and fences if it is a read or an atomic; q.mu is held. (A
// hint: if the state changes during w's Send, the loop calls Flush.)
func (q *QP) moreAfter(w *WQE) bool {
	if q.sq.next == q.sq.tail || q.stalled.Load() || !q.sendsNew() {
		return false
	}
	rd := q.rdOut
	if isRdAtomic(w.WR.Opcode) {
		rd++
	}
	return q.mayGo(&q.sq.ring[q.sq.next&q.sq.mask], rd)
}

// txResult applies Send's result; q.mu is held.
func (q *QP) txResult(w *WQE, seq, kicks uint64, res Result) {
	if w.seq != seq || w.state != wqeTx {
		return
	}
	switch res.Outcome {
	case Done:
		w.state, w.status = wqeDone, faultStatus(w, res.Status)
		if w.status != verbs.WCSuccess {
			if q.state == verbs.QPSErr {
				w.status = verbs.WCWRFlushErr // an earlier request's error came first
			} else {
				q.enterErr()
			}
		}
	case Pending:
		if w.early { // the response overtook Send's return
			w.early = false
			w.state, w.status = wqeDone, faultStatus(w, w.earlySt)
			if w.status != verbs.WCSuccess && q.state != verbs.QPSErr {
				q.enterErr()
			}
			return
		}
		if q.state == verbs.QPSErr {
			w.state, w.status = wqeDone, verbs.WCWRFlushErr
			return
		}
		w.state = wqePending
		if isRdAtomic(w.WR.Opcode) {
			w.rdAtomic = true
			q.rdOut++
		}
	case Stall:
		if q.state == verbs.QPSErr {
			w.state, w.status = wqeDone, verbs.WCWRFlushErr
			return
		}
		w.state = wqeQueued
		q.sq.next = seq
		// Wait for a Resume, unless one came while Send ran. Resume is
		// lock-free (kicks, then stalled), so stalled is set before kicks is
		// read: a Resume that misses the change of kicks finds stalled set.
		q.stalled.Store(true)
		if q.kicks.Load() != kicks {
			q.stalled.Store(false)
		}
	}
}

// retire moves finished requests, in posting order, into the send CQ; q.mu is held.
func (q *QP) retire() { q.retireTo(nil) }

// retireTo is retire, with the array of a poll of the send CQ lent to
// the transport's progress (ho, nil if none): a completion that may skip
// the CQ's ring (Handoff.take) goes there, as a receive's does. A
// signaled SEND's completion, pushed into the ring by the progress of a
// poll that then popped it, paid two compare-and-swaps and some two
// hundred instructions between them.
func (q *QP) retireTo(ho *Handoff) {
	for q.sq.head != q.sq.tail {
		w := &q.sq.ring[q.sq.head&q.sq.mask]
		if w.state != wqeDone {
			break
		}
		q.countSend(w)
		if h := captureHook.Get(); h != nil && opClass[w.WR.Opcode&15]&opLocal == 0 {
			q.capture(*h, w, true)
		}
		if w.signaled || w.status != verbs.WCSuccess {
			// Written where it goes: the hand-off's entry, or a local
			// one that push copies into the ring.
			var local verbs.WC
			wc := ho.take(q.scq)
			if wc == nil {
				wc = &local
			}
			*wc = verbs.WC{WRID: w.WR.WRID, Status: w.status, Opcode: w.WR.Opcode.WCOpcode(), QPNum: q.num}
			switch {
			case w.status != verbs.WCSuccess:
			case w.WR.Opcode == verbs.WRRDMARead:
				wc.ByteLen = w.Len
			case w.WR.Opcode == verbs.WRAtomicCmpAndSwp || w.WR.Opcode == verbs.WRAtomicFetchAndAdd:
				wc.ByteLen = 8
			}
			if wc == &local {
				q.scq.push(wc, false)
			}
		}
		w.Data = nil
		q.sq.head++
	}
	if q.sq.next < q.sq.head {
		q.sq.next = q.sq.head
	}
	q.sq.sent = max(q.sq.sent, q.sq.next)
	if q.draining && q.sq.head == q.sq.next && q.sq.next == q.sq.sent {
		q.draining = false
		q.attr.SQDraining = false
		if q.attr.EnSQDAsyncNotify {
			q.ctx.raise(verbs.AsyncEvent{Type: verbs.EventSQDrained, QP: q.v})
		}
	}
}

// complete is Requester.CompleteDeferred (and CompleteTo, with ho).
func (q *QP) complete(w *WQE, seq uint64, status verbs.WCStatus, ho *Handoff) bool {
	q.mu.Lock()
	status = faultStatus(w, status) // used only if w is still seq's
	if status != verbs.WCSuccess && q.state == verbs.QPSErr {
		// An earlier request's error came first: this one is flushed.
		status = verbs.WCWRFlushErr
	}
	if w.seq == seq && w.state == wqeTx {
		// The transport finished the request before Send returned Pending:
		// txResult completes it.
		w.early, w.earlySt = true, status
		q.mu.Unlock()
		return false
	}
	if w.seq != seq || w.state != wqePending {
		q.mu.Unlock()
		return false
	}
	w.state, w.status = wqeDone, status
	if w.rdAtomic {
		w.rdAtomic = false
		q.rdOut--
	}
	if status != verbs.WCSuccess && q.state != verbs.QPSErr {
		q.enterErr()
	}
	q.retireTo(ho)
	more := q.sq.next != q.sq.tail
	q.mu.Unlock()
	return more
}
