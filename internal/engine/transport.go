package engine

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Transport is a connected QP's wire: the one thing a provider implements.
// The engine calls it; it calls the engine back through the Endpoint it was
// given (its Requester and Responder). Every call comes with the QP
// unlocked unless it says otherwise.
type Transport interface {
	// Send starts or carries out w (see Result). The engine calls it from
	// one goroutine at a time per QP, in send-queue order.
	Send(w *WQE) Result
	// RecvPosted says receives were posted to the QP or its SRQ: a message
	// waiting for a receive buffer (an RNR) can go on.
	RecvPosted()
	// Modify is called before an application's Modify commits; an error
	// refuses it. (The state machine, the device's limits and the rule
	// that a connection manager's QPs are not connected by Modify are
	// checked already.)
	Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask, from, to verbs.QPState) error
	// Shutdown says the QP left the connected states: it entered ERR or
	// RESET, or was destroyed. It is called with the QP locked and must only
	// start the teardown (close a socket, set a flag), never call the engine.
	Shutdown(destroyed bool)
}

// Progressor is a Transport that the application's polling can drive
// (polled mode, as libfabric's manual progress). The engine decides when
// the application polls: from its first poll of a CQ of the QP that is not
// armed for an event, until it blocks (CQ.Wait, ReqNotify) or has not
// polled for PollIdle (nor waited, for BlockIdle: see idleTick).
type Progressor interface {
	// Progress does, without blocking, whatever the transport has ready
	// (incoming messages, responses, acknowledgements). ho takes receive
	// completions for the polling CQ (the transport passes a pointer to its
	// own copy to Responder.Deliver); Progress returns how many it put
	// there (Handoff.Len). ho is passed by value: a pointer would make it
	// escape to the heap through the interface call, an allocation per
	// poll.
	Progress(ho Handoff) int
	// Polled says whether the application polls: while it does, Progress
	// comes soon and often and the transport's own goroutines may step
	// aside; once it does not, the transport must progress on its own.
	Polled(on bool)
}

// DirectSender is a Transport that can also put a request out while
// PostSend holds the QP's lock, straight from the caller's work request,
// when the send queue is idle. (On a QP of a thread domain, OneSided may
// instead come from the poster's section, which excludes the lock's
// holders as the lock does: nothing else about it changes.) Such a
// request skips the hand-over to the transmitter (a second round trip on
// the lock, the transmitter's bookkeeping), and its WQE is filled after it
// went out: on a shared-memory ring this took about a tenth off an 8-byte
// message's latency.
//
// SendDirect gets the request (already checked), its payload resolved (n
// bytes in payload; a READ's sink, checked for local write access) and its
// WQE slot, of which only Seq and Signaled are set yet. It reports out when
// the request is out: done when it is complete already (an RDMA WRITE or
// READ the transport carried out itself), otherwise it is Pending (the
// transport completes it later). A request not out is declined and takes
// the ordinary path. SendDirect must not block (not even on a socket's
// lock), call the engine for this QP, or fail the QP.
//
// The requests of one PostSend list go through SendDirect one after the
// other, under one hold of the lock, until one is declined (the rest are
// queued). DirectEnd follows the last SendDirect or OneSided of a
// PostSend (but a OneSided with last, and a SEND's or SEND WITH
// IMMEDIATE's SendDirect posted alone: a SEND must set up nothing that
// DirectEnd would end), the lock still held: what the calls
// set up once for the requests of a list (shm: the window its revocations
// wait for) ends there, so that a list of small requests pays for it once
// (the doorbell of a hardware queue). A request's data must have moved
// when SendDirect returns done: DirectEnd releases, it does not complete. DirectDone follows a PostSend in which
// SendDirect put a request out, once the lock is released: what may wait
// (waking the peer) goes there.
//
// OneSided is SendDirect for the commonest case, an RDMA WRITE or READ of
// one segment on an idle queue: local is the segment's memory (its data,
// or a READ's sink, checked for local write access; never empty), and
// there is no WQE (nothing refers to the request once it is done). It
// reports whether the data has moved: the request is then complete.
// DirectDone is not owed for it; with last (no other request of the
// PostSend goes to the transport after it) it does DirectEnd's work
// itself, and DirectEnd is called only if an earlier call owes it: an
// interface call fewer for a request posted alone.
type DirectSender interface {
	SendDirect(w *WQE, wr *verbs.SendWR, payload [][]byte, n uint32) (out, done bool)
	OneSided(wr *verbs.SendWR, local []byte, last bool) bool
	DirectEnd()
	DirectDone()
}

// LaneSender is a DirectSender that lends PostSend its access to a peer's
// region for the rest of a window, so that the requests of a list that
// fall in it are carried out by the engine itself: bounds checked and
// data copied in line, with no call into the transport per request (a
// OneSided call and its checks were half of the instructions of an
// 8-byte WRITE posted in a list).
//
// OpenLane opens the window if it is not open (as OneSided does; DirectEnd
// closes it) and returns the lane of the region rkey allowing the remote
// access need (AccessRemoteWrite or AccessRemoteRead), checked as
// OneSided would check a request on it but for the request's bounds; nil
// when such requests must go through OneSided (which then decides how
// each goes). The lane stays valid, and the transport does not change it
// but through OpenLane, until DirectEnd or any other call into the
// transport; it is the transport's memory (no allocation per window).
// Before each request carried out on it, PostSend calls Hook if it is set
// and counts the request in N, which the transport adds to its own counts
// at DirectEnd.
type LaneSender interface {
	OpenLane(rkey uint32, need verbs.AccessFlags) *Lane
}

// Lane is a peer's region as LaneSender lends it: the remote addresses
// [Base, Base+len(Mem)) of the region RKey are Mem, mapped here, for the
// remote accesses in Need, by requests of at most Max bytes.
type Lane struct {
	RKey uint32
	Need verbs.AccessFlags
	Max  uint32
	Base uint64
	Mem  []byte
	N    uint64
	Hook func()
}

// Batcher is a Transport that writes requests queued one behind another
// together: one system call for several, as a doorbell rung once for a
// list. Send learns from WQE.More that the engine has another request ready
// to send right after w; it may then lay w's message out and keep it back,
// to be written with the next one's, and return Pending (the transport
// completes w once it is written). The engine's next call is Send for the
// next request, which writes what was kept back whatever becomes of its own
// request (one that fails its checks included), or, when that cannot go
// after all (the queue stalled, the QP left RTS meanwhile), Flush, which
// writes it; both come from the goroutine of the Send before, with the QP
// unlocked. A Send that keeps a message back may keep whatever serialises
// its wire until then.
type Batcher interface {
	Flush()
}

// Outcome is how Send left a work request.
type Outcome uint8

const (
	// Done: the work request is finished, with Result.Status. An error status
	// moves the QP to ERR (the failing request keeps its status, the rest flush).
	Done Outcome = iota
	// Pending: the request was handed to the transport; the transport calls
	// Requester.Complete when it finishes (a read response arrived, an ack came).
	Pending
	// Stall: the request cannot go now (no receive buffer at the responder,
	// no room on the wire). The engine keeps it at the head of the send
	// queue and sends nothing until the transport calls Requester.Resume.
	Stall
)

// Result is what Send returns.
type Result struct {
	Outcome Outcome
	Status  verbs.WCStatus
}

// Results for the common cases.
var (
	ResultOK      = Result{Outcome: Done, Status: verbs.WCSuccess}
	ResultPending = Result{Outcome: Pending}
	ResultStall   = Result{Outcome: Stall}
)

// Fail returns a Done result with an error status.
func Fail(s verbs.WCStatus) Result { return Result{Outcome: Done, Status: s} }

// WQE is a send work request in the send queue: a copy of the posted request
// (its SGList and Inline alias storage owned by the queue slot).
type WQE struct {
	WR      verbs.SendWR
	Len     uint32 // message length: the sum of the SGE lengths, or of the inline data
	Retries int    // free for the transport (RNR retry counting)
	Data    any    // free for the transport (per-request state)

	more     bool // another request is ready behind it (Batcher)
	seq      uint64
	state    wqeState
	status   verbs.WCStatus
	signaled bool
	rdAtomic bool // counted in the QP's outstanding reads/atomics
	early    bool // Complete came while Send was still running
	earlySt  verbs.WCStatus
	asked    bool           // the fault hook was asked about it
	capd     bool           // the capture hook was shown it going out
	fault    verbs.WCStatus // the status a fault gives it
	sge      []verbs.SGE
	inl      []byte
	bind     verbs.BindMW // a BIND_MW's, copied at the post
}

// Seq identifies the request for Requester.Complete; slots are reused,
// sequence numbers are not.
func (w *WQE) Seq() uint64 { return w.seq }

// More reports, during Send, whether the engine has another request ready
// to send right after this one (see Batcher).
func (w *WQE) More() bool { return w.more }

// Signaled reports whether the request produces a completion when it
// succeeds (SendSignaled, or a QP that signals all): someone waits for it.
func (w *WQE) Signaled() bool { return w.signaled }

// Endpoint is a transport's handle on its QP: the requester and responder
// sides, and the connection's control. It is a small value; copy it.
type Endpoint struct{ q *QP }

// Requester returns the QP's send side.
func (e Endpoint) Requester() Requester { return Requester(e) }

// Responder returns the QP's receive side.
func (e Endpoint) Responder() Responder { return Responder(e) }

// Num returns the QP number.
func (e Endpoint) Num() uint32 { return e.q.num }

// Type returns the QP type.
func (e Endpoint) Type() verbs.QPType { return e.q.typ }

// State returns the QP's state.
func (e Endpoint) State() verbs.QPState { return e.q.State() }

// Attr returns the QP's attributes, its state and capabilities included.
func (e Endpoint) Attr() verbs.QPAttr {
	a, _, _ := e.q.Query()
	return a
}

// Device returns the QP's device.
func (e Endpoint) Device() *Device { return e.q.dev }

// ConnectedTo reports whether the QP can receive from the QP numbered n: it
// is in RTR, RTS or SQD and, for RC, its destination is n.
func (e Endpoint) ConnectedTo(n uint32) bool {
	return e.q.canReceive() && (e.q.typ != verbs.QPTRC || e.q.adest.Load() == n)
}

// Transport returns the QP's transport.
func (e Endpoint) Transport() Transport {
	e.q.mu.Lock()
	defer e.q.mu.Unlock()
	return e.q.t
}

// Lookup returns the Endpoint of qp if it is a QP of device d.
func Lookup(qp *verbs.QP, d *Device) (Endpoint, bool) {
	q, ok := driver.QPOf(qp).(*QP)
	return Endpoint{q}, ok && q.dev == d
}

// Debug describes the send queue's state (for a test that gives up waiting).
func (e Endpoint) Debug() string {
	q := e.q
	q.mu.Lock()
	defer q.mu.Unlock()
	return fmt.Sprintf("%v sq head %d next %d tail %d sent %d stalled %v tx %v rdOut %d",
		q.state, q.sq.head, q.sq.next, q.sq.tail, q.sq.sent, q.stalled.Load(), q.txActive, q.rdOut)
}

// Fail moves the QP to ERR, flushing its work: the connection failed.
func (e Endpoint) Fail() { e.q.fail(nil) }

// Fatal moves the QP to ERR, flushing its work, and raises the asynchronous
// event ev for it (EventQPFatal, EventQPAccessErr, EventQPReqErr).
func (e Endpoint) Fatal(ev verbs.EventType) { e.q.fail(&ev) }

// Requester is the send side of a QP as its transport sees it.
type Requester struct{ q *QP }

// Payload appends to dst the memory holding w's outgoing data (its inline
// copy, or its SGEs resolved through the region table) and returns it. A
// wrong key, a region of another PD or an SGE outside its region gives
// WCLocProtErr.
func (r Requester) Payload(w *WQE, dst [][]byte) ([][]byte, verbs.WCStatus) {
	return r.q.payload(w, dst)
}

// Sink appends to dst the local memory an RDMA read or an atomic writes
// into; it needs local write access (WCLocProtErr otherwise).
func (r Requester) Sink(w *WQE, dst [][]byte) ([][]byte, verbs.WCStatus) {
	return r.q.segments(nil, w.WR.SGList, dst, verbs.AccessLocalWrite)
}

// Complete finishes a request that Send left Pending and then transmits
// what that released (a fence, the ORD limit); it may block on the
// transport, so a goroutine that receives must use CompleteDeferred. A
// stale request (flushed meanwhile, or its slot reused) is ignored. An
// error status moves the QP to ERR.
func (r Requester) Complete(w *WQE, seq uint64, status verbs.WCStatus) {
	if r.q.complete(w, seq, status, nil) {
		r.q.progress()
	}
}

// CompleteDeferred is Complete without the transmitting: it reports whether
// queued requests may now be sendable, in which case the transport must
// call Transmit from a goroutine that may block on it. A receiving
// goroutine uses it, since blocking it on the send side could deadlock two
// peers.
func (r Requester) CompleteDeferred(w *WQE, seq uint64, status verbs.WCStatus) bool {
	return r.q.complete(w, seq, status, nil)
}

// CompleteTo is CompleteDeferred from a transport's Progress: ho is the
// hand-off it was given, where a completion for the polled CQ may go
// (as Responder.Deliver's do) instead of through the CQ's ring.
func (r Requester) CompleteTo(w *WQE, seq uint64, status verbs.WCStatus, ho *Handoff) bool {
	return r.q.complete(w, seq, status, ho)
}

// Transmit sends whatever the send queue can send now.
func (r Requester) Transmit() { r.q.progress() }

// Resume ends a Stall: the engine sends from the head of the queue again
// (the responder posted a receive, an RNR timer expired, room appeared).
// It takes no lock, so a transport may call it for every event.
func (r Requester) Resume() {
	r.q.kicks.Add(1)
	if r.q.stalled.Swap(false) {
		r.q.progress()
	}
}

// RNRRetry returns the QP's rnr_retry (7: retry for ever).
func (r Requester) RNRRetry() uint8 {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.attr.RNRRetry
}

// Responder is the receive side of a QP as its transport sees it: where
// incoming messages are placed, with every check of keys, access and
// bounds.
type Responder struct{ q *QP }

// RecvCtx is a receive buffer taken from the receive queue (or SRQ) for an
// incoming message.
type RecvCtx struct {
	WRID uint64
	SGE  []verbs.SGE
}

// Num returns the QP number.
func (r Responder) Num() uint32 { return r.q.num }

// CanReceive reports whether the QP accepts incoming messages (RTR, RTS,
// SQD, SQE).
func (r Responder) CanReceive() bool { return r.q.canReceive() }

// IRD returns max_dest_rd_atomic: how many RDMA reads and atomics the QP
// accepts outstanding as a responder.
func (r Responder) IRD() int { return int(r.q.aird.Load()) }

// Access returns the QP's access flags (IBV_QP_ACCESS_FLAGS).
func (r Responder) Access() verbs.AccessFlags { return verbs.AccessFlags(r.q.aaccess.Load()) }

// MinRNRTimer returns the QP's min_rnr_timer code (what a requester waits
// after an RNR).
func (r Responder) MinRNRTimer() uint8 {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.attr.MinRNRTimer
}

// QKey returns the QP's Q_Key (UD).
func (r Responder) QKey() uint32 {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.attr.QKey
}

// TakeRecv takes the oldest posted receive (from the SRQ when the QP has
// one) for an incoming message. It returns false when there is none. The
// returned context is the QP's own and stays valid until the next TakeRecv.
//
// A taken receive must be finished with CompleteRecv; if the QP fails first,
// it is flushed before the receives still posted (it is older than them).
func (r Responder) TakeRecv() (*RecvCtx, bool) { return r.q.takeRecv() }

// RecvSegments appends to dst the memory of the receive buffers in rc; it
// needs local write access (WCLocProtErr otherwise). An injected receive
// fault (SetRecvFaultHook) is reported here too, as WCLocProtErr or
// WCLocLenErr: the transport handles it as it handles a real one.
func (r Responder) RecvSegments(rc *RecvCtx, dst [][]byte) ([][]byte, verbs.WCStatus) {
	if h := recvFaultHook.Get(); h != nil {
		if st := r.q.askRecvFault(*h, rc.WRID); st != verbs.WCSuccess {
			return dst, st
		}
	}
	return r.q.segments(nil, rc.SGE, dst, verbs.AccessLocalWrite)
}

// CompleteRecv reports a received message (or a receive that failed) on
// the receive CQ. A receive the QP already flushed is not completed again.
func (r Responder) CompleteRecv(rc *RecvCtx, wc *verbs.WC, solicited bool) {
	r.q.completeRecv(rc, wc, solicited, nil)
}

// CompleteRecvTo is CompleteRecv from a transport's Progress: ho is the
// hand-off it was given, where the completion may go (as Deliver's do)
// instead of through the CQ's ring.
func (r Responder) CompleteRecvTo(rc *RecvCtx, wc *verbs.WC, solicited bool, ho *Handoff) {
	r.q.completeRecv(rc, wc, solicited, ho)
}

// Deliver is TakeRecv, RecvSegments, the copy and CompleteRecv in one
// step, for a message that arrives whole (a transport's fast path): data
// goes into the oldest posted receive, which completes with wc (WRID and
// QPNum filled in). ok is false when no receive is posted (an RNR). A
// receive whose buffers fail the checks, or are too small, completes with
// WCLocProtErr or WCLocLenErr, which st reports; the transport then fails
// the QP as after CompleteRecv with an error. ho is the hand-off of the
// poll the transport runs in (Progressor.Progress's), or nil.
func (r Responder) Deliver(data []byte, wc *verbs.WC, solicited bool, ho *Handoff) (ok bool, st verbs.WCStatus) {
	return r.q.deliverRecv(data, wc, solicited, ho)
}

// LockRx serialises the delivery of incoming messages to the QP: a
// transport holds it from TakeRecv to CompleteRecv when several senders
// can reach the QP at once (UD).
func (r Responder) LockRx() { r.q.rxMu.Lock() }

// UnlockRx releases LockRx.
func (r Responder) UnlockRx() { r.q.rxMu.Unlock() }

// Resolve checks an incoming access of n bytes at addr through rkey: the
// region must exist, belong to the QP's PD and grant need
// (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic), the QP
// itself must allow that access (its QPAccessFlags), and the range must lie
// inside the region. A zero-length access is always allowed, as in verbs:
// it names no memory.
func (r Responder) Resolve(rkey uint32, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, Fault) {
	return r.q.resolveRemote(rkey, addr, n, need)
}

// Region returns the valid region rkey names, if it belongs to the QP's PD,
// for a transport that gives the peer direct access to it; the access,
// bounds and QP checks are then the transport's to make.
func (r Responder) Region(rkey uint32) (*MR, Fault) {
	mr := r.q.dev.mrs.lookup(rkey)
	if mr == nil || mr.wqp != nil && mr.wqp != r.q {
		return nil, FaultKey
	}
	if mr.pd != r.q.pd {
		return nil, FaultPD
	}
	return mr, FaultNone
}

// Atomic executes an incoming atomic operation and returns the value the
// target held before. The target needs remote atomic access and 8-byte
// alignment (FaultAlign). The 64-bit value is in the target host's byte
// order; the operation is atomic with respect to other atomics of any QP
// and to the CPU (sync/atomic).
func (r Responder) Atomic(rkey uint32, addr uint64, op verbs.WROpcode, compareAdd, swap uint64) (uint64, Fault) {
	return r.q.atomic(rkey, addr, op, compareAdd, swap)
}

// AtomicWrite executes an incoming ATOMIC_WRITE: the 8 bytes of v are
// stored at addr with one atomic store. The target needs remote write
// access (as RDMA Write) and 8-byte alignment (FaultAlign).
func (r Responder) AtomicWrite(rkey uint32, addr uint64, v [8]byte) Fault {
	return r.q.atomicWrite(rkey, addr, v)
}

// Flush executes an incoming FLUSH of n bytes at addr. The region must
// grant AccessFlushGlobal for FlushGlobal or AccessFlushPersistent for
// FlushPersistent, and hold the range. Data placed by earlier requests of
// the connection is already in the region's memory (transports place
// requests in order), so it is visible to this host's CPU when Flush
// returns; for FlushPersistent the range is also written back to the file
// that backs the memory, if any (msync with MS_SYNC), before Flush
// returns. FaultPersist reports a failed write-back. A zero-length flush
// names no memory and succeeds. Only the region's rights are checked, not
// the QP's access flags (connection managers set remote read, write and
// atomic on their QPs, and flush rights exist only on regions).
func (r Responder) Flush(rkey uint32, addr uint64, n uint32, typ verbs.FlushType) Fault {
	return r.q.flush(rkey, addr, n, typ)
}

// Invalidate carries out a Send with Invalidate's request: the region or
// type 2 memory window named by rkey, of the QP's PD, stops working (a
// type 1 window cannot be invalidated so: FaultAccess).
func (r Responder) Invalidate(rkey uint32) Fault { return r.q.invalidate(rkey) }

// Fail moves the QP to ERR, flushing its work.
func (r Responder) Fail() { r.q.fail(nil) }

// Fatal moves the QP to ERR, flushing its work, and raises the asynchronous
// event ev for it (EventQPAccessErr for an access violation, EventQPReqErr
// for an invalid request, EventQPFatal).
func (r Responder) Fatal(ev verbs.EventType) { r.q.fail(&ev) }
