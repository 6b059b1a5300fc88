package shm

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
)

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
	var h rec
	for {
		p, ok, err := c.respIn.peek(&h)
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
		c.respIn.advance(&h)
		got++
	}
	poke = c.respIn.publish()
	if c.reqIn.publish() { // what the last poll left to acknowledge
		poke = true
	}
	if c.stopped.Load() || !c.resp.CanReceive() {
		return poke, got
	}
	if c.held.Load() {
		c.held.Store(false)
	}
	rnr, ackNow := false, false
	for !c.peerFailed() { // a failed peer's requests are not executed: it flushed them
		p, ok, err := c.reqIn.peek(&h)
		if err != nil {
			c.fail(err)
			return false, got
		}
		if !ok {
			break
		}
		ackNow = ackNow || h.flags&fAck != 0
		r := c.serve(&h, p, ho)
		if r == hold || r == holdRNR {
			c.held.Store(true)
			rnr = r == holdRNR
			break
		}
		if r == stop {
			poke = true
			break
		}
		c.reqIn.advance(&h)
		c.nServed++
		got++
	}
	// In polled mode the consumed requests are acknowledged (the head
	// published) at the next poll, not in this one, which is about to hand
	// the application its completion: the store writes a line the
	// requester reads, and the next locked instruction of this poll would
	// wait for that line's round trip between cores. A poll comes soon in
	// polled mode, and the engine ends polled mode (publishing) after
	// engine.PollIdle. Acknowledged at once: a request someone waits for
	// (fAck: signaled, or the requester's send queue is filling), a
	// requester waiting for room or order, a held request, a ring a quarter
	// consumed.
	if !ackNow && c.deferAck(got, rnr) {
		atomicx.ReleaseU64(&c.ackable, c.reqIn.head)
	} else if c.reqIn.publish() {
		poke = true
	}
	// The RNR is shown to the requester, which may give up (rnr_retry).
	if pos := atomic.LoadUint64(c.mine.u64(offRNRPos)); rnr && pos != c.reqIn.head+1 {
		atomic.StoreUint64(c.mine.u64(offRNRPos), c.reqIn.head+1)
		poke = true
	} else if !rnr && pos != 0 {
		atomic.StoreUint64(c.mine.u64(offRNRPos), 0)
	}
	if c.respOut.publish() || c.owePoke {
		poke, c.owePoke = true, false
	}
	return poke, got
}

// publishAckable publishes the acknowledgement a poll deferred, from any
// goroutine: the head only moves forward, whoever publishes.
func (c *conn) publishAckable() {
	p := c.reqIn.c.head
	for {
		cur, v := atomic.LoadUint64(p), c.ackable.Load()
		if v <= cur || atomic.CompareAndSwapUint64(p, cur, v) {
			return
		}
	}
}

// deferAck reports whether the acknowledgement of the got requests just
// consumed may wait for the next poll; consMu is held.
func (c *conn) deferAck(got int, rnr bool) bool {
	return got > 0 && !rnr && !c.stopped.Load() && c.polled.Load() && c.reqIn.head-c.reqIn.pub < uint64(len(c.reqIn.data)/4) &&
		atomic.LoadUint32(c.reqIn.c.wait) == 0
}

// nak refuses the request at the consumer's position with status st (for
// the requester) and stops consuming; the caller moves the QP to ERR.
func (c *conn) nak(st verbs.WCStatus) int {
	c.reqIn.publish() // the requests before it are done: head first
	atomic.StoreUint32(c.mine.u32(offNakSt), uint32(st))
	raceRelease()
	atomic.StoreUint64(c.mine.u64(offNakPos), c.reqIn.head+1)
	c.stopped.Store(true)
	return stop
}

// fatal is nak plus the responder's move to ERR with the asynchronous
// event InfiniBand raises for the error.
func (c *conn) fatal(st verbs.WCStatus, ev verbs.EventType) int {
	c.nak(st)
	c.resp.Fatal(ev)
	return stop
}

// startRecv takes the receive a SEND of total bytes goes into (c.rx) and
// checks its buffers: served, holdRNR, or stop after recvErr.
func (c *conn) startRecv(total uint32) int {
	rc, ok := c.resp.TakeRecv()
	if !ok {
		return holdRNR
	}
	c.rx = rxState{active: true, rc: rc, total: total, dst: c.rx.dst[:0]}
	var st verbs.WCStatus
	if c.rx.dst, st = c.resp.RecvSegments(rc, c.rx.dst); st != verbs.WCSuccess {
		return c.recvErr(st, nakFor(st))
	}
	if engine.TotalLen(c.rx.dst) < int(total) {
		return c.recvErr(verbs.WCLocLenErr, nakFor(verbs.WCLocLenErr))
	}
	return served
}

// nakFor is the requester's status for a receive that failed with st
// (IB: a too-small buffer is the requester's invalid request, anything
// else an operation error at the responder).
func nakFor(st verbs.WCStatus) verbs.WCStatus {
	if st == verbs.WCLocLenErr {
		return verbs.WCRemInvReqErr
	}
	return verbs.WCRemOpErr
}

// recvErr completes the receive being filled with status st, naks the
// requester with nst and fails the QP.
func (c *conn) recvErr(st, nst verbs.WCStatus) int {
	wc := verbs.WC{Opcode: verbs.WCRecv, Status: st, SrcQP: c.peerQPN}
	c.resp.CompleteRecv(c.rx.rc, &wc, false)
	c.rx.active = false
	c.nak(nst)
	c.resp.Fail()
	return stop
}

func (c *conn) protoErr() int {
	c.fail(errCorrupt)
	return stop
}

// serve executes one request record as the responder.
func (c *conn) serve(h *rec, p []byte, ho *engine.Handoff) int {
	q := c.resp
	switch h.kind {
	case recSend:
		if h.flags&(fFirst|fLast|fInv) == fFirst|fLast && !c.rx.active {
			// A whole message: the engine's one-step delivery.
			if h.n != h.total {
				return c.protoErr()
			}
			wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: c.peerQPN, ByteLen: h.total}
			if h.flags&fImm != 0 {
				wc.Flags, wc.ImmData = verbs.WCFlagWithImm, h.imm
			}
			ok, st := q.Deliver(p, &wc, h.flags&fSolicited != 0, ho)
			switch {
			case !ok:
				return holdRNR
			case st != verbs.WCSuccess: // the receive completed with st
				c.nak(nakFor(st))
				q.Fail()
				return stop
			}
			return served
		}
		if h.flags&fFirst != 0 {
			if c.rx.active {
				return c.protoErr()
			}
			if r := c.startRecv(h.total); r != served {
				return r
			}
		} else if !c.rx.active {
			return c.protoErr()
		}
		if h.total != c.rx.total || uint64(h.n) > uint64(c.rx.total-c.rx.off) {
			return c.protoErr()
		}
		engine.CopyInto(c.rx.dst, int(c.rx.off), p)
		c.rx.off += h.n
		if h.flags&fLast == 0 {
			return served
		}
		if c.rx.off != c.rx.total {
			return c.protoErr()
		}
		return c.finishRecv(h)

	case recSendRef:
		return c.serveRef(h)

	case recWrite:
		if h.flags&fFirst != 0 && h.total > 0 {
			// The whole range is checked on the first piece, as a
			// responder checks the RETH of a write's first packet.
			if _, f := q.Resolve(h.rkey, h.addr, h.total, verbs.AccessRemoteWrite); f != engine.FaultNone {
				return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
			}
		}
		dst, f := q.Resolve(h.rkey, h.addr, h.n, verbs.AccessRemoteWrite)
		if f != engine.FaultNone {
			return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
		}
		copy(dst, p)
		if h.flags&(fLast|fImm) != fLast|fImm {
			return served
		}
		return c.immediate(h)

	case recImm:
		return c.immediate(h)

	case recReadReq:
		if q.IRD() == 0 {
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		}
		src, f := q.Resolve(h.rkey, h.addr, h.total, verbs.AccessRemoteRead)
		if f != engine.FaultNone {
			return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
		}
		maxp := uint32(c.respOut.maxPayload())
		for {
			off := c.rx.respOff
			n := min(maxp, h.total-off)
			b := c.respReserve(recSize(int(n)))
			if b == nil {
				return hold
			}
			r := rec{size: uint32(len(b)), kind: recReadResp, n: n, addr: uint64(off), total: h.total}
			if off+n == h.total {
				r.flags = fLast
			}
			putRec(b, r)
			copy(b[recHdr:], src[off:off+n])
			c.respOut.commit(len(b))
			c.rx.respOff += n
			if c.rx.respOff == h.total {
				break
			}
		}
		c.rx.respOff = 0
		return served

	case recFlush, recAtomicWr:
		if q.IRD() == 0 {
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		}
		var f engine.Fault
		if h.kind == recFlush {
			f = q.Flush(h.rkey, h.addr, h.total, verbs.FlushType(h.imm))
		} else {
			if len(p) != 8 {
				return c.protoErr()
			}
			f = q.AtomicWrite(h.rkey, h.addr, [8]byte(p))
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
		b := c.respReserve(recSize(8)) // room first: an atomic runs once
		if b == nil {
			return hold
		}
		op := verbs.WRAtomicFetchAndAdd
		if h.flags&fCAS != 0 {
			op = verbs.WRAtomicCmpAndSwp
		}
		old, f := q.Atomic(h.rkey, h.addr, op, binary.NativeEndian.Uint64(p), binary.NativeEndian.Uint64(p[8:]))
		switch f {
		case engine.FaultNone:
		case engine.FaultAlign:
			return c.fatal(verbs.WCRemInvReqErr, verbs.EventQPReqErr)
		default:
			return c.fatal(verbs.WCRemAccessErr, verbs.EventQPAccessErr)
		}
		r := rec{size: uint32(len(b)), kind: recAtomicResp, flags: fLast, n: 8, total: 8}
		putRec(b, r)
		binary.NativeEndian.PutUint64(b[recHdr:], old) // the sink holds it in host order
		c.respOut.commit(len(b))
		return served
	}
	return c.protoErr()
}

// serveRef receives a SEND by reference: a copy from the sender's region,
// which we map. The mapping is the teardown's to unmap: it is used entered.
func (c *conn) serveRef(h *rec) int {
	if !c.enter() {
		return hold // the connection is going away
	}
	defer c.leave()
	c.mapMu.Lock()
	r := c.srcs[h.rkey]
	c.mapMu.Unlock()
	if r == nil {
		return hold // the offer is on its way over the socket
	}
	if r.fallback || h.addr < r.base || uint64(h.total) > uint64(len(r.mem)) || h.addr-r.base > uint64(len(r.mem))-uint64(h.total) || c.rx.active {
		return c.protoErr()
	}
	if r := c.startRecv(h.total); r != served {
		return r
	}
	if !r.acquire() {
		// The sender deregistered the region of a SEND in flight.
		return c.recvErr(verbs.WCGeneralErr, verbs.WCRemOpErr)
	}
	engine.CopyInto(c.rx.dst, 0, r.at(h.addr, h.total))
	r.release()
	return c.finishRecv(h)
}

// finishRecv completes the SEND received into c.rx.
func (c *conn) finishRecv(h *rec) int {
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: c.peerQPN, ByteLen: h.total}
	switch {
	case h.flags&fImm != 0:
		wc.Flags, wc.ImmData = verbs.WCFlagWithImm, h.imm
	case h.flags&fInv != 0:
		if c.resp.Invalidate(h.imm) != engine.FaultNone {
			return c.recvErr(verbs.WCLocQPOpErr, verbs.WCRemInvReqErr)
		}
		wc.Flags, wc.ImmData = verbs.WCFlagWithInv, h.imm
	}
	c.rx.active = false
	c.resp.CompleteRecv(c.rx.rc, &wc, h.flags&fSolicited != 0)
	return served
}

// immediate delivers the immediate data of an RDMA WRITE WITH IMM, which
// consumes a receive.
func (c *conn) immediate(h *rec) int {
	rc, ok := c.resp.TakeRecv()
	if !ok {
		return holdRNR
	}
	wc := verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, SrcQP: c.peerQPN, ByteLen: h.total, Flags: verbs.WCFlagWithImm, ImmData: h.imm}
	c.resp.CompleteRecv(rc, &wc, h.flags&fSolicited != 0)
	return served
}

// respReserve reserves room in the peer's response ring; when there is
// none it asks the peer to poke us when it has consumed some.
func (c *conn) respReserve(n int) []byte {
	if b := c.respOut.reserve(n); b != nil {
		return b
	}
	if c.respOut.publish() {
		c.owePoke = true
	}
	atomic.StoreUint32(c.respOut.c.wait, 1)
	if c.respOut.refreshHead() != nil {
		c.fail(errCorrupt)
		return nil
	}
	return c.respOut.reserve(n)
}

// response takes a READ response piece or an atomic result for the oldest
// request waiting for one. It reports false when the connection failed.
func (c *conn) response(h *rec, p []byte) bool {
	e, ok := c.frontResp()
	if !ok {
		if c.stopped.Load() {
			return true // flushed meanwhile
		}
		c.protoErr()
		return false
	}
	if c.stopped.Load() {
		return true // the sink may be reused since the flush: drop it
	}
	switch {
	case h.kind == recReadResp && e.w.WR.Opcode == verbs.WRRDMARead:
		if h.addr > uint64(e.w.Len) || uint64(h.n) > uint64(e.w.Len)-h.addr {
			c.protoErr()
			return false
		}
		engine.CopyInto(e.dst, int(h.addr), p)
		if h.flags&fLast != 0 {
			c.popResp(verbs.WCSuccess)
		}
	case h.kind == recAtomicResp && len(p) == 8 && (e.w.WR.Opcode == verbs.WRAtomicCmpAndSwp || e.w.WR.Opcode == verbs.WRAtomicFetchAndAdd):
		engine.CopyInto(e.dst, 0, p)
		c.popResp(verbs.WCSuccess)
	default:
		c.protoErr()
		return false
	}
	return true
}
