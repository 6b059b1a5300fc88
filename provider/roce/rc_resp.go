package roce

import (
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// respState is the responder of an RC QP: it executes the peer's requests
// in PSN order and answers them. The device's receive lock serialises it.
type respState struct {
	q       *qp
	peer    netip.Addr
	epsn    uint32 // the PSN expected next
	msn     uint32 // messages completed
	nakSent bool   // a sequence NAK for epsn went out
	acked   uint32 // the PSN after the last one an ACK (or response) acknowledged
	// firstACK is when the first packet of a message was last acknowledged
	// unasked (firstACKDue).
	firstACK time.Time

	// the SEND being received
	recv struct {
		active bool
		rc     *engine.RecvCtx
		segs   [][]byte
		off    int
		room   int
	}
	// the RDMA WRITE being placed
	write struct {
		active bool
		dst    []byte
		off    int
	}
	// READs and atomics executed, for a duplicate to be answered again
	res     []resEntry
	resNext int

	bat   *batch    // packets on their way to the socket
	data  [1][]byte // put's payload, as batch.addRef takes it
	ackAt int       // the place+1 of this QP's deferred ACK in the device's queue (acks' lock)
}

type resEntry struct {
	valid       bool
	read        bool
	first, last uint32 // PSNs of the responses
	va          uint64
	rkey        uint32
	length      uint32
	orig        uint64 // an atomic's result
}

func (r *respState) init(q *qp) {
	r.q = q
	r.bat = newBatch(true)
}

// reset prepares the responder for a connection (the move to RTR).
func (r *respState) reset(epsn uint32) {
	q := r.q
	r.peer = q.path.dst
	r.epsn, r.msn, r.nakSent = epsn&0xFFFFFF, 0, false
	r.acked = r.epsn
	r.recv.active, r.write.active = false, false
	r.res = make([]resEntry, max(1, int(q.ep.Attr().MaxDestRdAtomic), maxIRDORD))
	r.resNext = 0
}

// request executes (or answers again) a request packet.
func (r *respState) request(p *ib.Packet, ho *engine.Handoff) {
	switch d := ib.PSNDiff(p.PSN, r.epsn); {
	case d > 0:
		// Packets were lost: tell the requester once, and drop until it
		// resends from epsn (go-back-N). What came in order before the
		// gap is acknowledged first: a requester that resent after an
		// earlier NAK may start no new retry from a NAK until an ACK has
		// come (Linux rxe's completer: a second NAK in one retry is
		// ignored, and the loss then costs a whole ACK timeout).
		if !r.nakSent {
			r.nakSent = true
			if r.acked != r.epsn {
				r.q.d.flushACKs() // a deferred one goes before the NAK, not after
			}
			if r.acked != r.epsn {
				r.reply(ib.Acknowledge, ib.SyndromeACK|ib.CreditsNone, ib.PSNAdd(r.epsn, -1))
			}
			r.reply(ib.Acknowledge, ib.SyndromeNAK|ib.NAKPSNSeq, r.epsn)
		}
		return
	case d < 0:
		r.duplicate(p)
		return
	}
	m := p.Mask
	var ok bool
	switch {
	case m&ib.IsSend != 0:
		ok = r.send(p, ho)
	case m&ib.IsWrite != 0:
		ok = r.rdmaWrite(p)
	case p.Op == ib.ReadRequest:
		r.read(p)
		return
	case p.Op == ib.CompareSwap || p.Op == ib.FetchAdd:
		r.atomic(p)
		return
	case p.Op == ib.Flush || p.Op == ib.AtomicWrite:
		ok = r.flushOrAtomicWrite(p)
	default:
		r.invalid(p)
		return
	}
	if !ok {
		return
	}
	r.epsn = ib.PSNAdd(r.epsn, 1)
	r.nakSent = false
	if p.AckReq || m&(ib.IsFirst|ib.IsLast) == ib.IsFirst && r.firstACKDue() {
		// The first packet of a longer message is acknowledged too,
		// unasked, now and then (see acks.go: the requester's timer).
		r.deferACK(p.PSN)
	}
}

// firstACKEvery is how often at most the first packet of a message is
// acknowledged unasked: often enough to keep a requester's
// retransmission timer off while messages flow (rxe's is put off a whole
// timeout, 2.1 s under rdma_cm, by each ACK it handles with packets
// outstanding), rarely enough that a requester blocked until its SEND
// completes is not woken in the middle of every message for it (both
// processes on one CPU, 64 KiB sleeping round trip: 167 -> 196 us and
// 3.4 more context switches with one per message).
const firstACKEvery = 4 * time.Millisecond

// firstACKDue reports whether the first packet of a message is to be
// acknowledged unasked (firstACKEvery), and if so notes when.
func (r *respState) firstACKDue() bool {
	now := time.Now()
	if now.Sub(r.firstACK) < firstACKEvery {
		return false
	}
	r.firstACK = now
	return true
}

// invalid refuses a request that breaks the transport's rules: the
// requester's request fails with REM_INV_REQ_ERR and this QP moves to ERR.
func (r *respState) invalid(p *ib.Packet) {
	r.reply(ib.Acknowledge, ib.SyndromeNAK|ib.NAKInvalidReq, p.PSN)
	r.q.resp.Fatal(verbs.EventQPReqErr)
}

// accessError refuses an access the registration does not grant.
func (r *respState) accessError(p *ib.Packet) {
	r.reply(ib.Acknowledge, ib.SyndromeNAK|ib.NAKRemAccess, p.PSN)
	r.q.resp.Fatal(verbs.EventQPAccessErr)
}

// send places a SEND packet; false when it was not executed (RNR, an error).
func (r *respState) send(p *ib.Packet, ho *engine.Handoff) bool {
	q := r.q
	mtu := q.path.mtu
	first, last := p.Mask&ib.IsFirst != 0, p.Mask&ib.IsLast != 0
	n := len(p.Payload)
	if !last && n != mtu || n > mtu || first == r.recv.active {
		r.invalid(p)
		return false
	}
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: q.path.destQPN}
	if first && last && p.Mask&ib.HasIETH == 0 {
		// A whole message: the engine's one-step delivery.
		wc.ByteLen = uint32(n)
		if p.Mask&ib.HasImm != 0 {
			wc.Flags, wc.ImmData = verbs.WCFlagWithImm, p.Imm
		}
		ok, st := q.resp.Deliver(p.Payload, &wc, p.SE, ho)
		switch {
		case !ok:
			r.rnr(p)
			return false
		case st != verbs.WCSuccess:
			r.recvFailed(p, st)
			return false
		}
		r.msn++
		return true
	}
	if first {
		rc, ok := q.resp.TakeRecv()
		if !ok {
			r.rnr(p)
			return false
		}
		segs, st := q.resp.RecvSegments(rc, r.recv.segs[:0])
		r.recv.segs = segs
		r.recv.active, r.recv.rc, r.recv.off, r.recv.room = true, rc, 0, engine.TotalLen(segs)
		if st != verbs.WCSuccess {
			r.recvError(p, st)
			return false
		}
	}
	if r.recv.off+n > r.recv.room {
		r.recvError(p, verbs.WCLocLenErr)
		return false
	}
	engine.CopyInto(r.recv.segs, r.recv.off, p.Payload)
	r.recv.off += n
	if !last {
		return true
	}
	wc.ByteLen = uint32(r.recv.off)
	switch {
	case p.Mask&ib.HasImm != 0:
		wc.Flags, wc.ImmData = verbs.WCFlagWithImm, p.Imm
	case p.Mask&ib.HasIETH != 0:
		if q.resp.Invalidate(p.Imm) != engine.FaultNone {
			r.recvError(p, verbs.WCLocQPOpErr)
			return false
		}
		wc.Flags, wc.ImmData = verbs.WCFlagWithInv, p.Imm
	}
	r.recv.active = false
	q.resp.CompleteRecv(r.recv.rc, &wc, p.SE)
	r.msn++
	return true
}

// recvError completes the receive being filled with st and refuses the
// request: a buffer too small is the requester's invalid request, anything
// else an operational error here.
func (r *respState) recvError(p *ib.Packet, st verbs.WCStatus) {
	wc := verbs.WC{Opcode: verbs.WCRecv, Status: st, SrcQP: r.q.path.destQPN}
	r.q.resp.CompleteRecv(r.recv.rc, &wc, false)
	r.recv.active = false
	r.recvFailed(p, st)
}

// recvFailed refuses a SEND whose receive completed with st.
func (r *respState) recvFailed(p *ib.Packet, st verbs.WCStatus) {
	code := uint8(ib.NAKRemOp)
	if st == verbs.WCLocLenErr || st == verbs.WCLocQPOpErr {
		code = ib.NAKInvalidReq
	}
	r.reply(ib.Acknowledge, ib.SyndromeNAK|code, p.PSN)
	r.q.resp.Fail()
}

// rnr refuses a packet that needs a receive when none is posted: the
// requester retries it after our min_rnr_timer.
func (r *respState) rnr(p *ib.Packet) {
	r.reply(ib.Acknowledge, ib.SyndromeRNR|r.q.resp.MinRNRTimer()&0x1F, p.PSN)
}

// rdmaWrite places an RDMA WRITE packet.
func (r *respState) rdmaWrite(p *ib.Packet) bool {
	q := r.q
	mtu := q.path.mtu
	first, last := p.Mask&ib.IsFirst != 0, p.Mask&ib.IsLast != 0
	n := len(p.Payload)
	if !last && n != mtu || n > mtu || first == r.write.active {
		r.invalid(p)
		return false
	}
	var rc *engine.RecvCtx
	if last && p.Mask&ib.HasImm != 0 {
		// The immediate consumes a receive: taken before anything is
		// placed, so that an RNR leaves nothing to undo.
		var ok bool
		if rc, ok = q.resp.TakeRecv(); !ok {
			r.rnr(p)
			return false
		}
	}
	if first {
		dst, f := q.resp.Resolve(p.RKey, p.VA, p.DMALen, verbs.AccessRemoteWrite)
		if f != engine.FaultNone {
			if rc != nil {
				wc := verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, Status: verbs.WCWRFlushErr, SrcQP: q.path.destQPN}
				q.resp.CompleteRecv(rc, &wc, false)
			}
			r.accessError(p)
			return false
		}
		r.write.active, r.write.dst, r.write.off = true, dst, 0
	}
	if r.write.off+n > len(r.write.dst) || last && r.write.off+n != len(r.write.dst) {
		r.invalid(p)
		return false
	}
	copy(r.write.dst[r.write.off:], p.Payload)
	r.write.off += n
	if !last {
		return true
	}
	r.write.active = false
	if rc != nil {
		wc := verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, SrcQP: q.path.destQPN, ByteLen: uint32(r.write.off),
			Flags: verbs.WCFlagWithImm, ImmData: p.Imm}
		q.resp.CompleteRecv(rc, &wc, p.SE)
	}
	r.write.dst = nil
	r.msn++
	return true
}

// read executes an RDMA READ request: its responses go out now.
func (r *respState) read(p *ib.Packet) {
	q := r.q
	if q.resp.IRD() == 0 {
		r.invalid(p)
		return
	}
	src, f := q.resp.Resolve(p.RKey, p.VA, p.DMALen, verbs.AccessRemoteRead)
	if f != engine.FaultNone {
		r.accessError(p)
		return
	}
	n := max(1, (int(p.DMALen)+q.path.mtu-1)/q.path.mtu)
	r.remember(resEntry{valid: true, read: true, first: p.PSN, last: ib.PSNAdd(p.PSN, n-1), va: p.VA, rkey: p.RKey, length: p.DMALen})
	r.msn++
	r.epsn = ib.PSNAdd(r.epsn, n)
	r.nakSent = false
	r.readResponses(p.PSN, src)
}

// readResponses sends the responses of a READ of src whose first is psn.
func (r *respState) readResponses(psn uint32, src []byte) {
	mtu := r.q.path.mtu
	n := max(1, (len(src)+mtu-1)/mtu)
	for i := range n {
		op := ib.ReadResponseOpcode(i, n)
		chunk := src[min(i*mtu, len(src)):min((i+1)*mtu, len(src))]
		var b ib.Builder
		b.H = r.bat.tail()
		b.BTH(op, false, ib.Pad(len(chunk)), r.q.path.pkey, r.q.path.destQPN, false, ib.PSNAdd(psn, i))
		if op.Info().Mask&ib.HasAETH != 0 {
			b.AETH(ib.SyndromeACK|ib.CreditsNone, r.msn)
		}
		r.put(b.H, chunk)
	}
	r.bat.flush(r.q.d)
	r.ackedTo(ib.PSNAdd(psn, n))
}

// ackedTo notes that an ACK or a response acknowledged every PSN before
// next.
func (r *respState) ackedTo(next uint32) {
	if ib.PSNDiff(next, r.acked) > 0 {
		r.acked = next
	}
}

// remember keeps a READ or atomic for its duplicates.
func (r *respState) remember(e resEntry) {
	r.res[r.resNext] = e
	r.resNext = (r.resNext + 1) % len(r.res)
}

// atomic executes CmpSwap or FetchAdd.
func (r *respState) atomic(p *ib.Packet) {
	q := r.q
	if q.resp.IRD() == 0 {
		r.invalid(p)
		return
	}
	op, cmpAdd, swap := verbs.WRAtomicFetchAndAdd, p.SwapAdd, uint64(0)
	if p.Op == ib.CompareSwap {
		op, cmpAdd, swap = verbs.WRAtomicCmpAndSwp, p.Compare, p.SwapAdd
	}
	orig, f := q.resp.Atomic(p.RKey, p.VA, op, cmpAdd, swap)
	switch f {
	case engine.FaultNone:
	case engine.FaultAlign:
		r.invalid(p)
		return
	default:
		r.accessError(p)
		return
	}
	r.remember(resEntry{valid: true, first: p.PSN, last: p.PSN, orig: orig})
	r.msn++
	r.epsn = ib.PSNAdd(r.epsn, 1)
	r.nakSent = false
	r.atomicAck(p.PSN, orig)
}

func (r *respState) atomicAck(psn uint32, orig uint64) {
	var b ib.Builder
	b.H = r.bat.tail()
	b.BTH(ib.AtomicAcknowledge, false, 0, r.q.path.pkey, r.q.path.destQPN, false, psn)
	b.AETH(ib.SyndromeACK|ib.CreditsNone, r.msn)
	b.AtomicAck(orig)
	r.out(b.H, nil)
	r.ackedTo(ib.PSNAdd(psn, 1))
}

// flushOrAtomicWrite executes a FLUSH or an ATOMIC_WRITE (IBTA 1.5).
func (r *respState) flushOrAtomicWrite(p *ib.Packet) bool {
	q := r.q
	if q.resp.IRD() == 0 {
		r.invalid(p)
		return false
	}
	var f engine.Fault
	if p.Op == ib.Flush {
		f = q.resp.Flush(p.RKey, p.VA, p.DMALen, verbs.FlushType(p.FETH&0xF))
	} else {
		if len(p.Payload) != 8 || p.DMALen != 8 {
			r.invalid(p)
			return false
		}
		f = q.resp.AtomicWrite(p.RKey, p.VA, [8]byte(p.Payload))
	}
	switch f {
	case engine.FaultNone:
	case engine.FaultAlign, engine.FaultPersist:
		r.invalid(p)
		return false
	default:
		r.accessError(p)
		return false
	}
	r.msn++
	return true
}

// duplicate answers a request that was executed already: the requester
// resent it (its ACK or response was lost, or it went back further).
func (r *respState) duplicate(p *ib.Packet) {
	switch {
	case p.Op == ib.ReadRequest:
		for i := range r.res {
			e := &r.res[i]
			if !e.valid || !e.read || ib.PSNDiff(p.PSN, e.first) < 0 || ib.PSNDiff(p.PSN, e.last) > 0 {
				continue
			}
			// A READ asked again from one of its responses: the range must
			// be the rest of the original.
			skip := uint64(ib.PSNDiff(p.PSN, e.first)) * uint64(r.q.path.mtu)
			if p.VA != e.va+skip || uint64(p.DMALen)+skip != uint64(e.length) || p.RKey != e.rkey {
				return
			}
			src, f := r.q.resp.Resolve(p.RKey, p.VA, p.DMALen, verbs.AccessRemoteRead)
			if f == engine.FaultNone {
				r.readResponses(p.PSN, src)
			}
			return
		}
	case p.Op == ib.CompareSwap || p.Op == ib.FetchAdd:
		for i := range r.res {
			if e := &r.res[i]; e.valid && !e.read && e.first == p.PSN {
				r.atomicAck(p.PSN, e.orig)
				return
			}
		}
	default:
		if p.AckReq || p.Mask&ib.IsLast != 0 {
			r.reply(ib.Acknowledge, ib.SyndromeACK|ib.CreditsNone, ib.PSNAdd(r.epsn, -1))
		}
	}
}

// reply sends an ACK or NAK.
func (r *respState) reply(op ib.Opcode, syndrome uint8, psn uint32) {
	var b ib.Builder
	b.H = r.bat.tail()
	b.BTH(op, false, 0, r.q.path.pkey, r.q.path.destQPN, false, psn)
	b.AETH(syndrome, r.msn)
	r.out(b.H, nil)
	if syndrome&0xE0 == ib.SyndromeACK {
		r.ackedTo(ib.PSNAdd(psn, 1))
	}
}

// out sends headers h (built at the batch's tail) and payload data
// (padded) to the peer.
func (r *respState) out(h, data []byte) {
	r.put(h, data)
	r.bat.flush(r.q.d)
}

// put adds a packet to the batch: headers h built at its tail, payload
// data (a READ's, in its memory region: not copied unless small, see
// batch.addRef) after them, padded. The batch waits for room in the
// socket rather than drop (the responder runs on the receive side, which
// may wait).
func (r *respState) put(h, data []byte) {
	r.data[0] = data
	r.bat.addRef(r.q.d, r.peer, len(h), r.data[:], 0, len(data))
	r.data[0] = nil
}
