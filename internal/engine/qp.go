package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// WQE is a send work request in the send queue: a copy of the posted request
// (its SGList and Inline alias storage owned by the queue slot).
type WQE struct {
	WR      verbs.SendWR
	Len     uint32 // message length: the sum of the SGE lengths, or of the inline data
	Retries int    // free for the wire (RNR retry counting)
	Data    any    // free for the wire (per-request transport state)

	seq      uint64
	state    wqeState
	status   verbs.WCStatus
	signaled bool
	rdAtomic bool // counted in the QP's outstanding reads/atomics
	early    bool // Complete came while Transmit was still running
	earlySt  verbs.WCStatus
	sge      []verbs.SGE
	inl      []byte
}

// Seq identifies the request for QP.Complete; slots are reused, sequence numbers are not.
func (w *WQE) Seq() uint64 { return w.seq }

// Signaled reports whether the request produces a completion when it
// succeeds (SendSignaled, or a QP that signals all): someone waits for it.
func (w *WQE) Signaled() bool { return w.signaled }

type wqeState uint8

const (
	wqeQueued  wqeState = iota // posted, not started
	wqeTx                      // inside Wire.Transmit
	wqePending                 // handed to the transport, waiting for QP.Complete
	wqeDone                    // finished, waiting to be retired into the CQ
)

type sendQueue struct {
	ring             []WQE
	mask             uint64
	head, next, tail uint64 // retire, transmit, post positions
	// sent is one past the last request ever handed to Transmit. A request
	// below it that is queued again (RNR stall) has begun: SQD still
	// finishes it, and the queue is not drained before it is done.
	sent uint64
}

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

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// RecvCtx is a receive buffer taken from the receive queue (or SRQ) for an
// incoming message.
type RecvCtx struct {
	WRID uint64
	SGE  []verbs.SGE
}

// QP is the engine's queue pair.
type QP struct {
	v      *verbs.QP
	ctx    *Context
	pd     *PD
	dev    *Device
	num    uint32
	typ    verbs.QPType
	scq    *CQ
	rcq    *CQ
	srq    *SRQ
	cap    verbs.QPCap
	sigAll bool
	deny   atomic.Uint32 // Restrict: opcodes (as 1<<op) the connected peer cannot execute
	wire   Wire
	direct DirectWire // wire, when it has the direct path
	dsrc   [][]byte   // postDirect's payload pieces
	// The regions the SGEs of postDirect and fillWQE (under mu) and of
	// DeliverRecv (under rqMu) last resolved to (Device.resolveCached).
	sendMR, recvMR *MR

	mu    sync.Mutex
	state verbs.QPState
	attr  verbs.QPAttr
	sq    sendQueue
	rqMu  sync.Mutex // guards rq; taken after mu when both are held
	rq    recvQueue  // unused with an SRQ

	// Lock-free copies of what the data path reads on every message; they
	// change only with mu held.
	astate    atomic.Uint32
	adest     atomic.Uint32
	aaccess   atomic.Uint32
	aird      atomic.Uint32
	dead      atomic.Bool
	txActive  bool
	stalled   atomic.Bool
	kicks     atomic.Uint64 // Kick calls, to catch a kick racing a stall
	rdOut     int           // outstanding RDMA reads and atomics (ORD accounting)
	draining  bool
	destroyed bool

	rxMu    sync.Mutex
	rx      RecvCtx
	rxTaken bool // rx holds a receive taken but not completed (guarded by rqMu)
}

// CreateQP implements driver.PD.
func (pd *PD) CreateQP(v *verbs.QP, attr *verbs.QPInitAttr) (driver.QP, error) {
	dev := pd.ctx.dev
	a := dev.cfg.Attr
	if attr.QPType != verbs.QPTRC && attr.QPType != verbs.QPTUD {
		return nil, fmt.Errorf("%w: QP type %v (the engine has RC and UD)", verbs.ErrNotSupported, attr.QPType)
	}
	c := attr.Cap
	if c.MaxSendWR > a.MaxQPWR || c.MaxSendSGE > a.MaxSGE || c.MaxInlineData > a.MaxInlineData {
		return nil, fmt.Errorf("%w: send capabilities %+v exceed the device's (max WR %d, SGE %d, inline %d)",
			verbs.ErrInvalid, c, a.MaxQPWR, a.MaxSGE, a.MaxInlineData)
	}
	var srq *SRQ
	if attr.SRQ != nil {
		var ok bool
		if srq, ok = driver.SRQOf(attr.SRQ).(*SRQ); !ok {
			return nil, fmt.Errorf("%w: SRQ of another provider", verbs.ErrInvalid)
		}
		if srq.pd != pd {
			return nil, fmt.Errorf("%w: SRQ of another protection domain", verbs.ErrInvalid)
		}
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	} else if c.MaxRecvWR > a.MaxQPWR || c.MaxRecvSGE > a.MaxSGE {
		return nil, fmt.Errorf("%w: receive capabilities %+v exceed the device's (max WR %d, SGE %d)",
			verbs.ErrInvalid, c, a.MaxQPWR, a.MaxSGE)
	}
	scq, ok1 := driver.CQOf(attr.SendCQ).(*CQ)
	rcq, ok2 := driver.CQOf(attr.RecvCQ).(*CQ)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: CQ of another provider", verbs.ErrInvalid)
	}
	q := &QP{v: v, ctx: pd.ctx, pd: pd, dev: dev, typ: attr.QPType, scq: scq, rcq: rcq, srq: srq, cap: c, sigAll: attr.SQSigAll}
	n := pow2(c.MaxSendWR)
	q.sq = sendQueue{ring: make([]WQE, n), mask: uint64(n - 1)}
	for i := range q.sq.ring {
		q.sq.ring[i].sge = make([]verbs.SGE, 0, c.MaxSendSGE)
		if c.MaxInlineData > 0 {
			q.sq.ring[i].inl = make([]byte, 0, c.MaxInlineData)
		}
	}
	if srq == nil {
		q.rq = newRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
		q.rx.SGE = make([]verbs.SGE, 0, c.MaxRecvSGE)
	} else {
		q.rx.SGE = make([]verbs.SGE, 0, srq.maxSGE)
	}
	if err := dev.addQP(q); err != nil {
		return nil, err
	}
	var w Wire = noWire{}
	if dev.cfg.NewWire != nil {
		if nw := dev.cfg.NewWire(q); nw != nil {
			w = nw
		}
	}
	q.setWire(w)
	pd.refs.Add(1)
	scq.refs.Add(1)
	rcq.refs.Add(1)
	if srq != nil {
		srq.attach(q)
	}
	return q, nil
}

// Num implements driver.QP.
func (q *QP) Num() uint32 { return q.num }

// Verbs returns the verbs object of the QP.
func (q *QP) Verbs() *verbs.QP { return q.v }

// Type returns the QP type.
func (q *QP) Type() verbs.QPType { return q.typ }

// Device returns the QP's device.
func (q *QP) Device() *Device { return q.dev }

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

// Wire returns the QP's wire.
func (q *QP) Wire() Wire { return q.wire }

// SetWire attaches the wire, for providers whose connection manager creates
// it after the QP (the QP must be in RESET or INIT).
func (q *QP) SetWire(w Wire) {
	q.mu.Lock()
	q.setWire(w)
	q.mu.Unlock()
}

// setWire attaches w and notes whether it has the direct path; q.mu is held
// (or q is not shared yet).
func (q *QP) setWire(w Wire) {
	q.wire = w
	q.direct, _ = w.(DirectWire)
}

// State returns the current state.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.astate.Load()) }

// setState changes the state; q.mu (and, for ERR, q.rqMu) is held.
func (q *QP) setState(s verbs.QPState) {
	q.state = s
	q.astate.Store(uint32(s))
}

// IRD returns max_dest_rd_atomic: how many RDMA reads and atomics the QP
// accepts outstanding as a responder.
func (q *QP) IRD() int { return int(q.aird.Load()) }

// Attr returns the current attributes.
func (q *QP) Attr() verbs.QPAttr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.QPState = q.state
	return a
}

// PostSend implements driver.QP.
func (q *QP) PostSend(wrs []verbs.SendWR) error {
	var perr error
	q.mu.Lock()
	if len(wrs) == 1 && q.direct != nil && q.postDirect(&wrs[0]) {
		q.mu.Unlock()
		q.direct.DirectDone(q)
		return nil
	}
	for i := range wrs {
		if err := q.postSend(&wrs[i]); err != nil {
			perr = &verbs.PostError{Index: i, WRID: wrs[i].WRID, Err: err}
			break
		}
	}
	q.progressLocked()
	return perr
}

// checkSend checks one request against the QP's state and limits and
// returns its length and whether it is inline; q.mu is held. directLen
// repeats the checks that apply to a SEND, WRITE or READ in RTS: a rule
// added here for those goes there too.
func (q *QP) checkSend(wr *verbs.SendWR) (n uint64, inline bool, err error) {
	if q.destroyed {
		return 0, false, verbs.ErrClosed
	}
	switch q.state {
	case verbs.QPSRTS, verbs.QPSSQD, verbs.QPSErr:
	case verbs.QPSSQE:
		if q.typ != verbs.QPTUD {
			return 0, false, fmt.Errorf("%w: QP is in %v", verbs.ErrInvalidState, q.state)
		}
	default:
		return 0, false, fmt.Errorf("%w: send posted to a QP in %v (needs RTS)", verbs.ErrInvalidState, q.state)
	}
	if q.sq.tail-q.sq.head >= uint64(q.cap.MaxSendWR) {
		return 0, false, fmt.Errorf("%w: send queue holds %d requests (max_send_wr)", verbs.ErrQueueFull, q.cap.MaxSendWR)
	}
	if len(wr.SGList) > q.cap.MaxSendSGE {
		return 0, false, fmt.Errorf("%w: %d SGEs, max_send_sge is %d", verbs.ErrInvalid, len(wr.SGList), q.cap.MaxSendSGE)
	}
	a := &q.dev.cfg.Attr
	op := wr.Opcode
	switch op {
	case verbs.WRSend, verbs.WRSendWithImm:
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRSendWithInv,
		verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite:
		if q.typ == verbs.QPTUD {
			return 0, false, fmt.Errorf("%w: %v on a UD QP", verbs.ErrInvalid, op)
		}
	case verbs.WRLocalInv, verbs.WRBindMW:
		return 0, false, fmt.Errorf("%w: %v", verbs.ErrNotSupported, op)
	default:
		return 0, false, fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, op)
	}
	if q.deny.Load()&(1<<op) != 0 { // op < 16 here
		return 0, false, fmt.Errorf("%w: %v: the connected peer does not implement it", verbs.ErrNotSupported, op)
	}
	if q.typ == verbs.QPTUD {
		if wr.AH == nil {
			return 0, false, fmt.Errorf("%w: UD send without an address handle", verbs.ErrInvalid)
		}
		if ah, ok := driver.AHOf(wr.AH).(*AH); !ok || ah.pd != q.pd || ah.dead.Load() {
			return 0, false, fmt.Errorf("%w: address handle of another protection domain, or destroyed", verbs.ErrInvalid)
		}
	}
	for _, s := range wr.SGList {
		n += uint64(s.Length)
	}
	inline = wr.Flags&verbs.SendInline != 0
	if inline && wr.Inline != nil {
		n = uint64(len(wr.Inline))
	}
	isAtomic := op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd
	switch {
	case isAtomic:
		if a.AtomicCap == verbs.AtomicNone {
			return 0, false, fmt.Errorf("%w: the device has no atomic operations", verbs.ErrNotSupported)
		}
		if n != 8 {
			return 0, false, fmt.Errorf("%w: atomic result buffer of %d bytes (must be 8)", verbs.ErrInvalid, n)
		}
	case op == verbs.WRFlush:
		if len(wr.SGList) != 0 || (inline && len(wr.Inline) != 0) {
			return 0, false, fmt.Errorf("%w: FLUSH carries no data", verbs.ErrInvalid)
		}
		if wr.FlushType != verbs.FlushGlobal && wr.FlushType != verbs.FlushPersistent {
			return 0, false, fmt.Errorf("%w: flush type %v", verbs.ErrInvalid, wr.FlushType)
		}
	case op == verbs.WRAtomicWrite:
		if n != 8 {
			return 0, false, fmt.Errorf("%w: ATOMIC_WRITE of %d bytes (must be 8)", verbs.ErrInvalid, n)
		}
	case op == verbs.WRRDMARead:
		if len(wr.SGList) > a.MaxSGERd {
			return 0, false, fmt.Errorf("%w: %d SGEs on an RDMA read, the device allows %d", verbs.ErrInvalid, len(wr.SGList), a.MaxSGERd)
		}
	}
	if inline {
		if op == verbs.WRRDMARead || isAtomic || op == verbs.WRFlush {
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

// postSend checks and queues one request; q.mu is held.
func (q *QP) postSend(wr *verbs.SendWR) error {
	n, inline, err := q.checkSend(wr)
	if err != nil {
		return err
	}
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

// directLen is checkSend for postDirect: a SEND, SEND_WITH_IMM, RDMA
// WRITE or RDMA READ on an RC QP in RTS (postDirect checked those), so
// only the checks that can still fail remain; ok is false exactly when
// checkSend would fail.
func (q *QP) directLen(wr *verbs.SendWR) (n uint64, inline, ok bool) {
	if q.destroyed || q.sq.tail-q.sq.head >= uint64(q.cap.MaxSendWR) || len(wr.SGList) > q.cap.MaxSendSGE ||
		q.deny.Load()&(1<<wr.Opcode) != 0 {
		return 0, false, false
	}
	if wr.Opcode == verbs.WRRDMARead && (len(wr.SGList) > q.dev.cfg.Attr.MaxSGERd || wr.Flags&verbs.SendInline != 0) {
		return 0, false, false
	}
	for _, s := range wr.SGList {
		n += uint64(s.Length)
	}
	if inline = wr.Flags&verbs.SendInline != 0; inline {
		if wr.Inline != nil {
			n = uint64(len(wr.Inline))
		}
		if n > uint64(q.cap.MaxInlineData) {
			return 0, false, false
		}
	}
	return n, inline, n <= uint64(q.dev.cfg.Port.MaxMsgSz)
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
	w.sge, w.inl = w.sge[:0], w.inl[:0]
}

// DirectWire is a Wire that can also put a request out while PostSend holds
// the QP's lock, straight from the caller's work request, when the send
// queue is idle. Such a request skips the hand-over to the transmitter (a
// second round trip on the lock, the transmitter's bookkeeping), and its
// WQE is filled after it went out: on a shared-memory ring this took about
// a tenth off an 8-byte message's latency. TransmitDirect gets the request
// (already checked), its payload resolved (n bytes in payload; a READ's
// sink, checked for local write access) and its WQE slot, of which only
// Seq and Signaled are set yet. It reports out when the request is out:
// done when it is complete already (an RDMA WRITE or READ the wire carried
// out itself), otherwise with the outcome Pending (the wire completes it
// later with Complete or CompleteDeferred, which wait for the lock). A
// request not out is declined and takes the ordinary path. It must not
// block (not even on a socket's lock), call into the engine for this QP,
// or fail the QP. DirectDone follows a TransmitDirect that put the request
// out, once the lock is released: what may wait (waking the peer) goes
// there.
type DirectWire interface {
	TransmitDirect(q *QP, w *WQE, wr *verbs.SendWR, payload [][]byte, n uint32) (out, done bool)
	DirectDone(q *QP)
}

// postDirect tries the direct path for wr (see DirectWire); q.mu is held.
// It reports whether the request was posted; when it was not, nothing
// changed and the ordinary path takes it (and reports its errors).
func (q *QP) postDirect(wr *verbs.SendWR) bool {
	if q.state != verbs.QPSRTS || q.typ == verbs.QPTUD || q.txActive || q.sq.next != q.sq.tail || q.stalled.Load() ||
		(wr.Opcode != verbs.WRSend && wr.Opcode != verbs.WRSendWithImm && wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMARead) ||
		wr.Flags&verbs.SendFence != 0 && q.rdOut > 0 {
		return false
	}
	n, inline, ok := q.directLen(wr)
	if !ok {
		return false // reported by the ordinary path
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
	ok = st == verbs.WCSuccess // a bad key goes the ordinary path, which reports it (post error or completion)
	done := false
	if ok {
		w.seq = q.sq.tail
		w.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
		ok, done = q.direct.TransmitDirect(q, w, wr, src, uint32(n))
	}
	clear(src) // no references to the caller's memory stay behind
	q.dsrc = src[:0]
	if !ok {
		return false
	}
	q.fillSent(w, wr, n)
	w.state = wqePending
	if done {
		w.state = wqeDone
	}
	q.sq.tail++
	q.sq.next = q.sq.tail
	q.sq.sent = max(q.sq.sent, q.sq.next)
	if done {
		q.retire() // in order: behind requests still pending
	}
	return true
}

// progress transmits queued requests. Whoever finds the transmitter idle
// becomes it and drains the queue; other posters only enqueue. So requests
// leave in order, no goroutine waits for another, and a wire may call back
// into the engine (even for this QP) from Transmit.
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
	for {
		w := q.nextTx()
		if w == nil {
			break
		}
		w.state = wqeTx
		seq, kicks := w.seq, q.kicks.Load()
		q.mu.Unlock()
		res := q.wire.Transmit(q, w)
		q.mu.Lock()
		q.txResult(w, seq, kicks, res)
		q.retire()
	}
	q.txActive = false
	q.retire()
	q.mu.Unlock()
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
	switch {
	case q.state == verbs.QPSRTS, q.state == verbs.QPSSQE && q.typ == verbs.QPTUD:
	case q.state == verbs.QPSSQD && q.sq.next < q.sq.sent:
	default:
		return nil
	}
	w := &q.sq.ring[q.sq.next&q.sq.mask]
	if w.WR.Flags&verbs.SendFence != 0 && q.rdOut > 0 {
		return nil // a fenced request waits for earlier reads and atomics
	}
	if isRdAtomic(w.WR.Opcode) && q.rdOut >= int(q.attr.MaxRdAtomic) && q.attr.MaxRdAtomic > 0 {
		return nil // ORD reached: wait for a read or atomic to complete
	}
	q.sq.next++
	q.sq.sent = max(q.sq.sent, q.sq.next)
	return w
}

// txResult applies Transmit's result; q.mu is held.
func (q *QP) txResult(w *WQE, seq, kicks uint64, res Result) {
	if w.seq != seq || w.state != wqeTx {
		return
	}
	switch res.Outcome {
	case Done:
		w.state, w.status = wqeDone, res.Status
		if res.Status != verbs.WCSuccess {
			if q.state == verbs.QPSErr {
				w.status = verbs.WCWRFlushErr // an earlier request's error came first
			} else {
				q.enterErr()
			}
		}
	case Pending:
		if w.early { // the response overtook Transmit's return
			w.early = false
			w.state, w.status = wqeDone, w.earlySt
			if w.earlySt != verbs.WCSuccess && q.state != verbs.QPSErr {
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
		// Wait for a Kick, unless one came while Transmit ran. Kick is
		// lock-free (kicks, then stalled), so stalled is set before kicks is
		// read: a Kick that misses the change of kicks finds stalled set.
		q.stalled.Store(true)
		if q.kicks.Load() != kicks {
			q.stalled.Store(false)
		}
	}
}

// retire moves finished requests, in posting order, into the send CQ; q.mu is held.
func (q *QP) retire() {
	for q.sq.head != q.sq.tail {
		w := &q.sq.ring[q.sq.head&q.sq.mask]
		if w.state != wqeDone {
			break
		}
		if w.signaled || w.status != verbs.WCSuccess {
			wc := verbs.WC{WRID: w.WR.WRID, Status: w.status, Opcode: w.WR.Opcode.WCOpcode(), QPNum: q.num}
			switch {
			case w.status != verbs.WCSuccess:
			case w.WR.Opcode == verbs.WRRDMARead:
				wc.ByteLen = w.Len
			case w.WR.Opcode == verbs.WRAtomicCmpAndSwp || w.WR.Opcode == verbs.WRAtomicFetchAndAdd:
				wc.ByteLen = 8
			}
			q.scq.push(&wc, false)
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

// Complete finishes a request that Transmit left Pending and then transmits
// what that released (a fence, the ORD limit). A stale request (flushed
// meanwhile, or its slot reused) is ignored. An error status moves the QP
// to ERR.
func (q *QP) Complete(w *WQE, seq uint64, status verbs.WCStatus) {
	if q.CompleteDeferred(w, seq, status) {
		q.progress()
	}
}

// Progress transmits whatever the send queue can send now.
func (q *QP) Progress() { q.progress() }

// CompleteDeferred is Complete without the transmitting: it reports whether
// queued requests may now be sendable, in which case the wire must call
// Progress from a goroutine that may block on the transport. A receiving
// goroutine uses it, since blocking it on the send side could deadlock two
// peers.
func (q *QP) CompleteDeferred(w *WQE, seq uint64, status verbs.WCStatus) bool {
	q.mu.Lock()
	if status != verbs.WCSuccess && q.state == verbs.QPSErr {
		// An earlier request's error came first: this one is flushed.
		status = verbs.WCWRFlushErr
	}
	if w.seq == seq && w.state == wqeTx {
		// The wire finished the request before Transmit returned Pending:
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
	q.retire()
	more := q.sq.next != q.sq.tail
	q.mu.Unlock()
	return more
}

// Kick resumes a send queue stalled by Transmit (the responder posted a receive, an RNR timer expired).
// It takes no lock, so a wire may call it for every receive posted.
func (q *QP) Kick() {
	q.kicks.Add(1)
	if q.stalled.Swap(false) {
		q.progress()
	}
}

// Stalled reports whether the send queue waits for a Kick.
func (q *QP) Stalled() bool { return q.stalled.Load() }

// SetError moves the QP to ERR, flushing its work. Wires call it when the
// connection fails.
func (q *QP) SetError() { q.fail(nil) }

// Fatal moves the QP to ERR, flushing its work, and raises the asynchronous
// event ev for it (EventQPFatal, EventQPAccessErr, EventQPReqErr).
func (q *QP) Fatal(ev verbs.EventType) { q.fail(&ev) }

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
	q.wire.Shutdown(q, false)
}

func (q *QP) flushRecv() {
	for ; q.rq.head != q.rq.tail; q.rq.head++ {
		r := &q.rq.ring[q.rq.head&q.rq.mask]
		wc := verbs.WC{WRID: r.wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		q.rcq.push(&wc, false)
	}
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
		q.wire.RecvPosted(q)
	}
	return perr
}

// LockRx serialises the delivery of incoming messages to q: a wire holds it
// from TakeRecv to CompleteRecv when several senders can reach q at once (UD).
func (q *QP) LockRx() { q.rxMu.Lock() }

// UnlockRx releases LockRx.
func (q *QP) UnlockRx() { q.rxMu.Unlock() }

// CanReceive reports whether the QP accepts incoming messages (RTR, RTS, SQD, SQE).
func (q *QP) CanReceive() bool { return q.canReceive() }

func (q *QP) canReceive() bool {
	st := q.State()
	return !q.dead.Load() && st >= verbs.QPSRTR && st <= verbs.QPSSQE
}

// TakeRecv takes the oldest posted receive (from the SRQ when the QP has
// one) for an incoming message. It returns false when there is none. The
// returned context is the QP's own and stays valid until the next TakeRecv.
//
// A taken receive must be finished with CompleteRecv; if the QP fails first,
// it is flushed before the receives still posted (it is older than them).
func (q *QP) TakeRecv() (*RecvCtx, bool) {
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

// DeliverRecv is TakeRecv, RecvSegments, the copy and CompleteRecv in one
// step, for a message that arrives whole (a provider's fast path): data goes
// into the oldest posted receive (the SRQ's when the QP has one), which
// completes with wc (WRID and QPNum filled in). ok is false when no receive
// is posted (an RNR). A receive whose buffers fail the checks, or are too
// small, completes with WCLocProtErr or WCLocLenErr, which st reports; the
// caller then fails the QP as after CompleteRecv with an error. ho is the
// hand-off of the poll the caller runs in (PollProgress's), or nil.
func (q *QP) DeliverRecv(data []byte, wc *verbs.WC, solicited bool, ho *Handoff) (ok bool, st verbs.WCStatus) {
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
	for _, s := range sge {
		if s.Length == 0 {
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

// CompleteRecv reports a received message (or a receive that failed) on
// the receive CQ.
//
// A receive the QP already flushed (it failed meanwhile) is not completed again.
func (q *QP) CompleteRecv(rc *RecvCtx, wc *verbs.WC, solicited bool) {
	q.rqMu.Lock()
	taken := q.rxTaken
	q.rxTaken = false
	q.rqMu.Unlock()
	if !taken {
		return
	}
	wc.WRID = rc.WRID
	wc.QPNum = q.num
	q.rcq.push(wc, solicited)
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
	w := q.wire
	q.mu.Unlock()

	if err := w.Modify(q, attr, mask, from, to); err != nil {
		return err
	}

	q.mu.Lock()
	if q.state != from && to != verbs.QPSErr && to != verbs.QPSReset {
		// The QP changed state (an error) while the wire prepared the transition.
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
	if m&verbs.QPAttrRnrRetry != 0 {
		t.RnrRetry = a.RnrRetry
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
	if m&verbs.QPAttrMinRnrTimer != 0 {
		t.MinRnrTimer = a.MinRnrTimer
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
	q.wire.Shutdown(q, false)
}

// Query implements driver.QP.
func (q *QP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.QPState, a.CurQPState, a.Cap = q.state, q.state, q.cap
	ia := verbs.QPInitAttr{SendCQ: q.scq.v, RecvCQ: q.rcq.v, Cap: q.cap, QPType: q.typ, SQSigAll: q.sigAll, UserData: q.v.UserData()}
	if q.srq != nil {
		ia.SRQ = q.srq.v
	}
	return a, ia, nil
}

// Destroy implements driver.QP.
func (q *QP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	q.reset()
	q.destroyed = true
	q.dead.Store(true)
	q.wire.Shutdown(q, true)
	q.mu.Unlock()
	q.dev.removeQP(q)
	if q.srq != nil {
		q.srq.detach(q)
	}
	q.scq.refs.Add(-1)
	q.rcq.refs.Add(-1)
	q.pd.refs.Add(-1)
	return nil
}

// noWire is the wire of a QP that has none yet: nothing can be sent.
type noWire struct{}

func (noWire) Modify(*QP, *verbs.QPAttr, verbs.QPAttrMask, verbs.QPState, verbs.QPState) error {
	return nil
}
func (noWire) Transmit(*QP, *WQE) Result { return Fail(verbs.WCRetryExcErr) }
func (noWire) RecvPosted(*QP)            {}
func (noWire) Shutdown(*QP, bool)        {}

// CMWire is the wire of a QP that only a connection manager connects, until
// it does: the application's own moves to RTR and RTS fail with Err, and
// anything posted meanwhile is flushed.
type CMWire struct{ Err error }

// Modify implements Wire.
func (w CMWire) Modify(q *QP, attr *verbs.QPAttr, mask verbs.QPAttrMask, from, to verbs.QPState) error {
	if to == verbs.QPSRTR || to == verbs.QPSRTS {
		return w.Err
	}
	return nil
}

// Transmit implements Wire.
func (CMWire) Transmit(*QP, *WQE) Result { return Fail(verbs.WCWRFlushErr) }

// RecvPosted implements Wire.
func (CMWire) RecvPosted(*QP) {}

// Shutdown implements Wire.
func (CMWire) Shutdown(*QP, bool) {}

// ConnectedTo reports whether the QP can receive from the QP numbered n: it
// is in RTR, RTS or SQD and, for RC, its destination is n.
func (q *QP) ConnectedTo(n uint32) bool {
	return q.canReceive() && (q.typ != verbs.QPTRC || q.adest.Load() == n)
}

// Restrict makes PostSend refuse ops with ErrNotSupported: a wire calls it
// when the connected peer cannot execute them (an iWARP peer without the
// RFC 7306 extensions gets no immediate data and no atomics).
func (q *QP) Restrict(ops ...verbs.WROpcode) {
	var m uint32
	for _, op := range ops {
		m |= 1 << op
	}
	q.deny.Store(m)
}

// Establish moves a QP in RESET or INIT to RTS on a connection made by a
// connection manager: w carries its traffic, ird and ord are the negotiated
// inbound and outbound RDMA read/atomic depths. Receives posted before
// remain posted; sends posted later go out on w.
func (q *QP) Establish(w Wire, ird, ord uint8) error {
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
	}
	q.setWire(w)
	q.attr.MaxDestRdAtomic, q.attr.MaxRdAtomic = ird, ord
	q.aird.Store(uint32(ird))
	q.setState(verbs.QPSRTS)
	q.mu.Unlock()
	q.progress()
	return nil
}

// SetRNRRetry sets rnr_retry on a QP that a connection manager connected
// (rdma_conn_param's rnr_retry_count), which no Modify transition sets.
func (q *QP) SetRNRRetry(n uint8) {
	q.mu.Lock()
	q.attr.RnrRetry = min(n, 7)
	q.mu.Unlock()
}

// Ready moves a QP in RESET to INIT with the given access flags, as
// rdma_create_qp does for a QP that a connection manager will connect.
func (q *QP) Ready(access verbs.AccessFlags) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != verbs.QPSReset {
		return fmt.Errorf("%w: QP in %v", verbs.ErrInvalidState, q.state)
	}
	q.attr.PortNum = 1
	q.attr.QPAccessFlags = access
	q.aaccess.Store(uint32(access))
	q.setState(verbs.QPSInit)
	return nil
}

// CQs returns the QP's send and receive CQs (for a wire's polled mode).
func (q *QP) CQs() (send, recv *CQ) { return q.scq, q.rcq }
