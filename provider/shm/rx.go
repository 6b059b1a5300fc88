package shm

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
)

// refWaitMax bounds the wait of a SEND by reference for the offer of its
// source, which the peer sent over the socket before the record.
const refWaitMax = time.Second

// errNoOffer ends a connection whose peer sent a SEND by reference to a
// region it did not offer.
var errNoOffer = errors.New("shm: peer referenced a region it never offered")

// consumer is the responder's side of the connection: the rings of our
// segment, consumed by whichever goroutine holds mu (a poll, the socket
// goroutine), and the response ring it produces into.
type consumer struct {
	mu      sync.Mutex
	req     ring.Consumer
	resp    ring.Consumer
	respOut ring.Producer
	msg     rxState
	stopped atomic.Bool // our QP failed: consume nothing more
	held    atomic.Bool // the request consumer waits (RNR, response ring full)
	owePoke bool        // a publish asked for a poke not yet sent
	// ackPoke is the poke a requester waiting for its acknowledgement
	// asked for (its Wait), which a consume that handed this side's
	// application a message left to the application's next call: a
	// reply's poke carries it (takeAckPoke).
	ackPoke atomic.Bool
	// ackable is the request ring's head whose publication a poll deferred
	// (see deferAck); Shutdown publishes it before the QP's failure.
	ackable atomic.Uint64 // written with a release store (no handshake depends on it)
	nServed uint64        // request records served (tests)
	refWait time.Time     // since when a SEND by reference waits for its source's offer
}

// rxState is the request consumer's state across records.
type rxState struct {
	active  bool // a SEND is being received into rc
	rc      *engine.RecvCtx
	dst     [][]byte
	off     uint32
	total   uint32
	respOff uint32 // READ response bytes already produced for the held request
}

// What serve did with a request record.
const (
	served  = iota // consumed
	hold           // not now: no room for the response, a mapping on its way
	holdRNR        // not now: no receive posted (an RNR)
	stop           // the QP failed: consume nothing more
)

// consume processes both inbound rings; consMu is held. It reports whether
// the peer needs a poke, and how many records it took. ho is the hand-off
// of the poll it runs in, if any (engine.Handoff).
func (c *conn) consume(ho *engine.Handoff) (poke bool, got int) {
	var h ring.Rec
	// The response ring is usually empty (responses are to our READs and
	// atomics): Empty looks without Peek's call (some forty instructions
	// of every poll).
	for !c.in.resp.Empty() {
		p, ok, err := c.in.resp.Peek(&h)
		if err != nil {
			c.fail(err)
			return false, got
		}
		if !ok {
			break
		}
		if !c.response(&h, p) {
			return false, got
		}
		c.in.resp.Advance(&h)
		got++
	}
	poke = c.in.resp.Publish()
	if c.in.req.Publish() { // what the last poll left to acknowledge
		poke = true
	}
	if c.in.stopped.Load() || !c.resp.CanReceive() {
		return poke, got
	}
	if c.in.held.Load() {
		c.in.held.Store(false)
	}
	rnr, ackNow, recvd := false, false, false
	for !c.in.req.Empty() && !c.peerFailed() { // a failed peer's requests are not executed: it flushed them
		p, ok, err := c.in.req.Peek(&h)
		if err != nil {
			c.fail(err)
			return false, got
		}
		if !ok {
			break
		}
		ackNow = ackNow || h.Flags&fAck != 0
		recvd = recvd || h.Flags&fLast != 0 && (h.Kind == recSend || h.Kind == recSendRef || h.Kind == recImm)
		r := c.serve(&h, p, ho)
		if r == hold || r == holdRNR {
			c.in.held.Store(true)
			rnr = r == holdRNR
			break
		}
		if r == stop {
			poke = true
			break
		}
		c.in.req.Advance(&h)
		c.in.nServed++
		got++
	}
	// In polled mode the consumed requests are acknowledged (the head
	// published) at the next poll, not in this one, which is about to hand
	// the application its completion: the store writes a line the
	// requester reads, and the next locked instruction of this poll would
	// wait for that line's round trip between cores. A poll comes soon in
	// polled mode, and the engine ends polled mode (publishing) after
	// engine.PollIdle (engine.BlockIdle when the application's blocking
	// waits returned meanwhile). Acknowledged at once: a request someone waits for
	// (fAck: signaled, or the requester's send queue is filling), a
	// requester waiting for room or order, a held request, a ring a quarter
	// consumed.
	//
	// The head is published at once otherwise; the poke a requester that
	// waits for it asked for is left to this side's next call when this
	// consume handed a message to an application in polled mode (it
	// polls, or a wait of its blocks in the socket): a request-response
	// application replies next, and the reply's poke then wakes the
	// requester once for both, where it woke for the acknowledgement and
	// again for the reply. The next poll, wait, SEND, or the end of
	// polled mode (engine.PollIdle, or BlockIdle) sends it otherwise.
	deferPoke := false
	if !ackNow && c.deferAck(got, rnr) {
		atomicx.ReleaseU64(&c.in.ackable, c.in.req.Head)
	} else if c.in.req.Publish() {
		deferPoke = recvd && !rnr && c.polled.Load()
		poke = poke || !deferPoke
	}
	// The RNR is shown to the requester, which may give up (rnr_retry).
	if pos := atomic.LoadUint64(c.mine.U64(offRNRPos)); rnr && pos != c.in.req.Head+1 {
		atomic.StoreUint64(c.mine.U64(offRNRPos), c.in.req.Head+1)
		poke = true
	} else if !rnr && pos != 0 {
		atomic.StoreUint64(c.mine.U64(offRNRPos), 0)
	}
	if c.in.respOut.Publish() || c.in.owePoke {
		poke, c.in.owePoke = true, false
	}
	if deferPoke && !poke {
		c.in.ackPoke.Store(true)
	}
	return poke, got
}

// takeAckPoke reports whether a consume left a poke to this call (see
// consumer.ackPoke), clearing it: the caller sends it, or a poke it sends
// anyway carries it.
func (c *conn) takeAckPoke() bool {
	return c.in.ackPoke.Load() && c.in.ackPoke.Swap(false)
}

// publishAckable publishes the acknowledgement a poll deferred, from any
// goroutine: the head only moves forward, whoever publishes.
func (c *conn) publishAckable() {
	p := c.in.req.C.Head
	for {
		cur, v := atomic.LoadUint64(p), c.in.ackable.Load()
		if v <= cur || atomic.CompareAndSwapUint64(p, cur, v) {
			return
		}
	}
}

// deferAck reports whether the acknowledgement of the got requests just
// consumed may wait for the next poll; consMu is held.
func (c *conn) deferAck(got int, rnr bool) bool {
	return got > 0 && !rnr && !c.in.stopped.Load() && c.polled.Load() && c.in.req.Head-c.in.req.Pub < uint64(len(c.in.req.Data)/4) &&
		atomic.LoadUint32(c.in.req.C.Wait) == 0
}

// nak refuses the request at the consumer's position with status st (for
// the requester) and stops consuming; the caller moves the QP to ERR.
func (c *conn) nak(st verbs.WCStatus) int {
	c.in.req.Publish() // the requests before it are done: head first
	atomic.StoreUint32(c.mine.U32(offNakSt), uint32(st))
	ring.RaceRelease()
	atomic.StoreUint64(c.mine.U64(offNakPos), c.in.req.Head+1)
	c.mine.moved() // the peer's direct window stops
	c.in.stopped.Store(true)
	return stop
}

// fatal is nak plus the responder's move to ERR with the asynchronous
// event InfiniBand raises for the error.
func (c *conn) fatal(st verbs.WCStatus, ev verbs.EventType) int {
	c.nak(st)
	c.resp.Fatal(ev)
	return stop
}

// startRecv takes the receive a SEND of total bytes goes into (c.in.msg) and
// checks its buffers: served, holdRNR, or stop after recvErr.
func (c *conn) startRecv(total uint32) int {
	rc, ok := c.resp.TakeRecv()
	if !ok {
		return holdRNR
	}
	c.in.msg = rxState{active: true, rc: rc, total: total, dst: c.in.msg.dst[:0]}
	var st verbs.WCStatus
	if c.in.msg.dst, st = c.resp.RecvSegments(rc, c.in.msg.dst); st != verbs.WCSuccess {
		return c.recvErr(st, engine.NAKStatus(st))
	}
	if engine.TotalLen(c.in.msg.dst) < int(total) {
		return c.recvErr(verbs.WCLocLenErr, engine.NAKStatus(verbs.WCLocLenErr))
	}
	return served
}

// recvErr completes the receive being filled with status st, naks the
// requester with nst and fails the QP.
func (c *conn) recvErr(st, nst verbs.WCStatus) int {
	wc := verbs.WC{Opcode: verbs.WCRecv, Status: st, SrcQP: c.peerQPN}
	c.resp.CompleteRecv(c.in.msg.rc, &wc, false)
	c.in.msg.active = false
	c.nak(nst)
	c.resp.Fail()
	return stop
}

func (c *conn) protoErr() int {
	c.fail(errCorrupt)
	return stop
}

// serve executes one request record as the responder.
func (c *conn) serve(h *ring.Rec, p []byte, ho *engine.Handoff) int {
	q := c.resp
	switch h.Kind {
	case recSend:
		if h.Flags&(fFirst|fLast|fInv) == fFirst|fLast && !c.in.msg.active {
			// A whole message: the engine's one-step delivery.
			if h.N != h.Total {
				return c.protoErr()
			}
			wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: c.peerQPN, ByteLen: h.Total}
			if h.Flags&fImm != 0 {
				wc.Flags, wc.ImmData = verbs.WCFlagWithImm, h.Imm
			}
			ok, st := q.Deliver(p, &wc, h.Flags&fSolicited != 0, ho)
			switch {
			case !ok:
				return holdRNR
			case st != verbs.WCSuccess: // the receive completed with st
				c.nak(engine.NAKStatus(st))
				q.Fail()
				return stop
			}
			return served
		}
		if h.Flags&fFirst != 0 {
			if c.in.msg.active {
				return c.protoErr()
			}
			if r := c.startRecv(h.Total); r != served {
				return r
			}
		} else if !c.in.msg.active {
			return c.protoErr()
		}
		if h.Total != c.in.msg.total || uint64(h.N) > uint64(c.in.msg.total-c.in.msg.off) {
			return c.protoErr()
		}
		engine.CopyInto(c.in.msg.dst, int(c.in.msg.off), p)
		c.in.msg.off += h.N
		if h.Flags&fLast == 0 {
			return served
		}
		if c.in.msg.off != c.in.msg.total {
			return c.protoErr()
		}
		return c.finishRecv(h)

	case recSendRef:
		return c.serveRef(h)

	case recWrite:
		if h.Flags&fFirst != 0 && h.Total > 0 {
			// The whole range is checked on the first piece, as a
			// responder checks the RETH of a write's first packet.
			if _, f := q.Resolve(h.RKey, h.Addr, h.Total, verbs.AccessRemoteWrite); f != engine.FaultNone {
				return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
			}
		}
		dst, f := q.Resolve(h.RKey, h.Addr, h.N, verbs.AccessRemoteWrite)
		if f != engine.FaultNone {
			return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
		}
		copy(dst, p)
		if h.Flags&(fLast|fImm) != fLast|fImm {
			return served
		}
		return c.immediate(h)

	case recImm:
		return c.immediate(h)

	case recReadReq:
		if q.IRD() == 0 {
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		}
		src, f := q.Resolve(h.RKey, h.Addr, h.Total, verbs.AccessRemoteRead)
		if f != engine.FaultNone {
			return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
		}
		maxp := uint32(c.in.respOut.MaxPayload())
		for {
			off := c.in.msg.respOff
			n := min(maxp, h.Total-off)
			b := c.respReserve(ring.Size(int(n)))
			if b == nil {
				return hold
			}
			r := ring.Rec{Size: uint32(len(b)), Kind: recReadResp, N: n, Addr: uint64(off), Total: h.Total}
			if off+n == h.Total {
				r.Flags = fLast
			}
			ring.PutRec(b, r)
			copy(b[ring.HdrLen:], src[off:off+n])
			c.in.respOut.Commit(len(b))
			c.in.msg.respOff += n
			if c.in.msg.respOff == h.Total {
				break
			}
		}
		c.in.msg.respOff = 0
		return served

	case recFlush, recAtomicWr:
		if q.IRD() == 0 {
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		}
		var f engine.Fault
		if h.Kind == recFlush {
			f = q.Flush(h.RKey, h.Addr, h.Total, verbs.FlushType(h.Imm))
		} else {
			if len(p) != 8 {
				return c.protoErr()
			}
			f = q.AtomicWrite(h.RKey, h.Addr, [8]byte(p))
		}
		switch f {
		case engine.FaultNone:
			return served
		case engine.FaultAlign, engine.FaultPersist:
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		}
		return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)

	case recAtomicReq:
		if len(p) != 16 {
			return c.protoErr()
		}
		if q.IRD() == 0 {
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		}
		b := c.respReserve(ring.Size(8)) // room first: an atomic runs once
		if b == nil {
			return hold
		}
		op := verbs.WRAtomicFetchAndAdd
		if h.Flags&fCAS != 0 {
			op = verbs.WRAtomicCmpAndSwp
		}
		old, f := q.Atomic(h.RKey, h.Addr, op, binary.NativeEndian.Uint64(p), binary.NativeEndian.Uint64(p[8:]))
		switch f {
		case engine.FaultNone:
		case engine.FaultAlign:
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		default:
			return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
		}
		r := ring.Rec{Size: uint32(len(b)), Kind: recAtomicResp, Flags: fLast, N: 8, Total: 8}
		ring.PutRec(b, r)
		binary.NativeEndian.PutUint64(b[ring.HdrLen:], old) // the sink holds it in host order
		c.in.respOut.Commit(len(b))
		return served
	}
	return c.protoErr()
}

// serveRef receives a SEND by reference: a copy from the sender's region,
// which we map. The mapping is the teardown's to unmap: it is used entered.
func (c *conn) serveRef(h *ring.Rec) int {
	if !c.enter() {
		return hold // the connection is going away
	}
	defer c.leave()
	c.remotes.mu.Lock()
	r := c.remotes.srcs[h.RKey]
	c.remotes.mu.Unlock()
	if r == nil {
		// The offer is on its way over the socket: the peer sent it before
		// the record, so it is in our socket already. A peer that never
		// sent one would hold the connection for ever.
		now := time.Now()
		if c.in.refWait.IsZero() {
			c.in.refWait = now
			time.AfterFunc(refWaitMax, c.wake) // look again, polled or not
		} else if now.Sub(c.in.refWait) > refWaitMax {
			c.fail(errNoOffer)
			return stop
		}
		return hold
	}
	c.in.refWait = time.Time{}
	if r.fallback || h.Addr < r.base || uint64(h.Total) > uint64(len(r.mem)) || h.Addr-r.base > uint64(len(r.mem))-uint64(h.Total) || c.in.msg.active {
		return c.protoErr()
	}
	if r := c.startRecv(h.Total); r != served {
		return r
	}
	if !r.acquire() {
		// The sender deregistered the region of a SEND in flight.
		return c.recvErr(verbs.WCGeneralErr, verbs.WCRemOpErr)
	}
	engine.CopyInto(c.in.msg.dst, 0, r.at(h.Addr, h.Total))
	r.release()
	return c.finishRecv(h)
}

// finishRecv completes the SEND received into c.in.msg.
func (c *conn) finishRecv(h *ring.Rec) int {
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: c.peerQPN, ByteLen: h.Total}
	switch {
	case h.Flags&fImm != 0:
		wc.Flags, wc.ImmData = verbs.WCFlagWithImm, h.Imm
	case h.Flags&fInv != 0:
		if c.resp.Invalidate(h.Imm) != engine.FaultNone {
			return c.recvErr(verbs.WCLocQPOpErr, verbs.WCRemInvReqErr)
		}
		wc.Flags, wc.ImmData = verbs.WCFlagWithInv, h.Imm
	}
	c.in.msg.active = false
	c.resp.CompleteRecv(c.in.msg.rc, &wc, h.Flags&fSolicited != 0)
	return served
}

// immediate delivers the immediate data of an RDMA WRITE WITH IMM, which
// consumes a receive.
func (c *conn) immediate(h *ring.Rec) int {
	rc, ok := c.resp.TakeRecv()
	if !ok {
		return holdRNR
	}
	wc := verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, SrcQP: c.peerQPN, ByteLen: h.Total, Flags: verbs.WCFlagWithImm, ImmData: h.Imm}
	c.resp.CompleteRecv(rc, &wc, h.Flags&fSolicited != 0)
	return served
}

// respReserve reserves room in the peer's response ring; when there is
// none it asks the peer to poke us when it has consumed some.
func (c *conn) respReserve(n int) []byte {
	if b := c.in.respOut.Reserve(n); b != nil {
		return b
	}
	if c.in.respOut.Publish() {
		c.in.owePoke = true
	}
	atomic.StoreUint32(c.in.respOut.C.Wait, 1)
	if c.in.respOut.RefreshHead() != nil {
		c.fail(errCorrupt)
		return nil
	}
	return c.in.respOut.Reserve(n)
}

// response takes a READ response piece or an atomic result for the oldest
// request waiting for one. It reports false when the connection failed.
func (c *conn) response(h *ring.Rec, p []byte) bool {
	e, ok := c.frontResp()
	if !ok {
		if c.in.stopped.Load() {
			return true // flushed meanwhile
		}
		c.protoErr()
		return false
	}
	if c.in.stopped.Load() {
		return true // the sink may be reused since the flush: drop it
	}
	switch {
	case h.Kind == recReadResp && e.w.WR.Opcode == verbs.WRRDMARead:
		if h.Addr > uint64(e.w.Len) || uint64(h.N) > uint64(e.w.Len)-h.Addr {
			c.protoErr()
			return false
		}
		engine.CopyInto(e.dst, int(h.Addr), p)
		if h.Flags&fLast != 0 {
			c.popResp(verbs.WCSuccess)
		}
	case h.Kind == recAtomicResp && len(p) == 8 && (e.w.WR.Opcode == verbs.WRAtomicCmpAndSwp || e.w.WR.Opcode == verbs.WRAtomicFetchAndAdd):
		engine.CopyInto(e.dst, 0, p)
		c.popResp(verbs.WCSuccess)
	default:
		c.protoErr()
		return false
	}
	return true
}
