package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// QP is the engine's queue pair. Its send side is in send.go, its receive
// side in recv.go, its state machine in modify.go and its connection to a
// transport in connect.go.
type QP struct {
	v      *verbs.QP
	ctx    *Context
	pd     *PD
	dev    *Device
	num    uint32
	ord    uint64 // creation order on the device (fault injection)
	typ    verbs.QPType
	scq    *CQ
	rcq    *CQ
	srq    *SRQ
	cap    verbs.QPCap
	sigAll bool
	deny   atomic.Uint32 // opcodes (as 1<<op) the connected peer cannot execute
	t      Transport
	direct DirectSender // t, when it has the direct path
	lanes  LaneSender   // t, when it lends lanes (and is a DirectSender)
	batch  Batcher      // t, when it gathers queued requests into one write
	cm     bool         // connected by a connection manager, not by Modify
	prog   atomic.Pointer[progress]
	dsrc   [][]byte  // postDirect's payload pieces
	one    [1][]byte // postSendOne's payload, for the call's time
	// dsrcUsed is how much of dsrc holds references (clearDsrc).
	dsrcUsed int
	// The regions the SGEs of postDirect and fillWQE (under mu) and of
	// deliverRecv (under rqMu) last resolved to (Device.resolveCached).
	sendMR, recvMR *MR
	// oneOps and maxMsg are what check would find of a request postOne
	// takes that does not change: the opcodes (as 1<<op) that the QP's
	// type and capabilities allow with one segment (RC, max_send_wr and
	// max_send_sge at least 1, max_sge_rd for a READ), and the port's
	// largest message.
	oneOps uint32
	maxMsg uint32

	mu    qpLock
	state verbs.QPState
	attr  verbs.QPAttr
	sq    sendQueue
	rqMu  sync.Mutex // guards rq; taken after mu when both are held
	rq    recvQueue  // unused with an SRQ

	// Lock-free copies of what the data path reads on every message; they
	// change only with mu held.
	astate       atomic.Uint32
	adest        atomic.Uint32
	aaccess      atomic.Uint32
	aird         atomic.Uint32
	dead         atomic.Bool
	txActive     bool
	cnt          verbs.QPCounters // send side (under mu)
	rcnt         recvCounts       // receive side (under rqMu)
	inGone       bool             // counted in the device's goneCnt (under dev.cntMu)
	faultSeq     uint64           // send requests the fault hook was asked about
	recvFaultSeq atomic.Uint64    // receives the receive fault hook was asked about
	faultEv      verbs.EventType  // an event a fault raises once q.mu is let go
	stalled      atomic.Bool
	kicks        atomic.Uint64 // Resume calls, to catch one racing a stall
	rdOut        int           // outstanding RDMA reads and atomics (ORD accounting)
	draining     bool
	destroyed    bool

	rxMu    sync.Mutex
	rx      RecvCtx
	rxTaken bool // rx holds a receive taken but not completed (guarded by rqMu)
}

// CreateQP implements driver.PD.
func (pd *PD) CreateQP(v *verbs.QP, attr *verbs.QPInitAttr) (driver.QP, error) {
	if pd.dead.Load() {
		return nil, errPDGone
	}
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
	q.oneOps, q.maxMsg = oneOps(attr.QPType, c, &a), dev.cfg.Port.MaxMsgSz
	q.mu.td = v != nil && v.PD() != nil && v.PD().TD() != nil
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
	var t Transport = unconnected{q}
	if dev.cfg.NewTransport != nil {
		if nt := dev.cfg.NewTransport(Endpoint{q}); nt != nil {
			t = nt
		}
	} else {
		q.cm = true
	}
	q.setTransport(t)
	pd.refs.Add(1)
	scq.refs.Add(1)
	rcq.refs.Add(1)
	if srq != nil {
		srq.attach(q)
	}
	return q, nil
}

// oneOps is QP.oneOps for a QP of type typ with capabilities c on a
// device with attributes a.
func oneOps(typ verbs.QPType, c verbs.QPCap, a *verbs.DeviceAttr) uint32 {
	if typ != verbs.QPTRC || c.MaxSendWR < 1 || c.MaxSendSGE < 1 {
		return 0
	}
	ops := uint32(1) << verbs.WRRDMAWrite
	if a.MaxSGERd >= 1 {
		ops |= 1 << verbs.WRRDMARead
	}
	return ops
}

// Num implements driver.QP.
func (q *QP) Num() uint32 { return q.num }

// State returns the current state.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.astate.Load()) }

// setState changes the state; q.mu (and, for ERR, q.rqMu) is held.
func (q *QP) setState(s verbs.QPState) {
	q.state = s
	q.astate.Store(uint32(s))
}

// canReceive reports whether the QP accepts incoming messages (RTR, RTS, SQD, SQE).
func (q *QP) canReceive() bool {
	st := q.State()
	return !q.dead.Load() && st >= verbs.QPSRTR && st <= verbs.QPSSQE
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
	q.t.Shutdown(true)
	q.detach()
	q.mu.Unlock()
	c := q.Counters()
	q.dev.gone(q, &c)
	q.dev.removeQP(q)
	if q.srq != nil {
		q.srq.detach(q)
	}
	q.scq.refs.Add(-1)
	q.rcq.refs.Add(-1)
	q.pd.refs.Add(-1)
	return nil
}

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
