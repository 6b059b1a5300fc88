package roce

import (
	"encoding/binary"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// Tuning of the requester.
const (
	// windowBytes bounds what is sent and not yet acknowledged (or, for a
	// READ, what is asked for and not yet received) when a connection
	// starts and after losses: a UDP socket's receive buffer is about
	// 400 KiB unless net.core.rmem_max or CAP_NET_ADMIN raises it, and a
	// burst beyond the peer's would be dropped and retransmitted. While
	// nothing is lost the window grows, up to maxWindowBytes and a quarter
	// of this device's own receive buffer (the peer's is unknown: a host
	// like this one, as on loopback, is the guess, and a loss halves the
	// window again). A larger window lets a peer that the scheduler keeps
	// off its CPU for a while find a burst waiting, rather than the sender
	// stop after 160 KiB.
	windowBytes    = 160 << 10
	maxWindowBytes = 2 << 20
	// ackEvery is how many packets of a long message go between two that
	// ask to be acknowledged (the last one of each message asks too). Each
	// ACK opens the window by as many, which then leave as two full
	// batches: 15 packets of a 4 KiB MTU are the most a GSO batch holds
	// (16 took two system calls, the 16th alone). An ACK costs the sender
	// a read and the handling; one per batch was 5% of a loopback
	// sender's time, and one per two batches measured 1.03x the
	// bandwidth. It stays below the least window (windowBytes), or the
	// packet that asks would wait for the ACK timeout.
	ackEvery = 30
)

// unit kinds: how a work request goes on the wire.
const (
	kSend = iota
	kWrite
	kRead
	kAtomic
	kFlush
	kAtomicWrite
)

// swqe is a work request the requester carries. A READ larger than the
// window goes as several READ requests (chunks), one after the other: the
// responder sends a chunk's responses at once, and the window must hold
// them.
type swqe struct {
	w     *engine.WQE
	seq   uint64
	kind  int
	total uint32
	// the current unit: a message's packets, or a READ chunk's request
	first    uint32 // its first PSN, once assigned
	assigned bool
	psns     int // the PSNs it takes
	npkt     int // request packets
	sent     int // request packets sent
	// READ: the current chunk, its responses received
	roff, rlen uint32
	got        int
	sink       [][]byte
}

// sendState is the requester and completer of an RC QP (q.mu).
type sendState struct {
	q        *qp
	ring     []swqe
	head, n  int
	tx       int    // index (from head) of the first unit with packets to send
	npsn     uint32 // next PSN to assign
	una      uint32 // oldest PSN not acknowledged
	nxt      uint32 // next PSN to send (una <= nxt <= npsn)
	high     uint32 // after the last PSN sent so far (nxt <= high <= npsn; goBack lowers nxt only)
	retries  int    // left before RETRY_EXC_ERR
	resent   uint64 // packets sent again (counters)
	rnrNaks  uint64 // RNR NAKs received (counters)
	rnrLeft  int
	timer    *time.Timer
	timerOn  bool      // timer is pending (it may fire before due: see armTimer)
	due      time.Time // when the ACK timeout expires; zero: not armed
	rnrWait  bool      // an RNR timer runs: nothing is sent meanwhile
	rnrTimer *time.Timer
	goneBack uint32 // the PSN a READ's missing responses were last asked again from (+1; 0: none)
	backHigh uint32 // after the PSN of the response that made the requester ask again
	nakPSN   uint32 // the PSN of the sequence NAK last gone back for (+1; 0: none since progress)
	cwnd     int    // the window in packets (window)
	ssthresh int    // below it the window grows by what is acknowledged, above by one packet an ACK
	bat      *batch // packets on their way to the socket
	segs     [][]byte
	segsOf   *swqe // the request whose payload segs holds, during fill
	done     []doneWR
	started  bool
}

type doneWR struct {
	w   *engine.WQE
	seq uint64
	st  verbs.WCStatus
}

func (s *sendState) init(q *qp) {
	s.q = q
	n := max(q.ep.Attr().Cap.MaxSendWR, 1)
	s.ring = make([]swqe, n)
	s.bat = newBatch(false)
	s.timer = time.AfterFunc(time.Hour, s.timeout)
	s.timer.Stop()
	s.rnrTimer = time.AfterFunc(time.Hour, s.rnrExpired)
	s.rnrTimer.Stop()
}

// start sets the first PSN (the move to RTS).
func (s *sendState) start(psn uint32) {
	s.npsn, s.una, s.nxt, s.high = psn, psn, psn, psn
	s.retries = int(s.q.path.retryCnt)
	s.rnrLeft = int(s.q.path.rnrRetry)
	s.cwnd, s.ssthresh = s.minWindow(), s.maxWindow()
	s.started = true
}

// reset forgets every request (the QP was reset: the engine discarded
// them without completions); q.mu is held.
func (s *sendState) reset() {
	for i := range s.ring {
		s.ring[i].w = nil
	}
	s.head, s.n, s.tx, s.started, s.rnrWait, s.goneBack = 0, 0, 0, false, false, 0
	s.stopTimers()
	s.timerOn, s.due = false, time.Time{}
}

func (s *sendState) stopTimers() {
	s.timer.Stop()
	s.rnrTimer.Stop()
}

func (s *sendState) at(i int) *swqe { return &s.ring[(s.head+i)%len(s.ring)] }

func kindOf(op verbs.WROpcode) int {
	switch op {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return kWrite
	case verbs.WRRDMARead:
		return kRead
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		return kAtomic
	case verbs.WRFlush:
		return kFlush
	case verbs.WRAtomicWrite:
		return kAtomicWrite
	}
	return kSend
}

// completesAtPeer reports whether a request of op makes a receive
// completion at the peer: a SEND or a WRITE with immediate data.
func completesAtPeer(op verbs.WROpcode) bool {
	switch op {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv, verbs.WRRDMAWriteWithImm:
		return true
	}
	return false
}

// send is Send for an RC QP: the request joins the queue and goes out as
// far as the window allows; it completes when acknowledged (Pending). When
// another request follows (w.More), its packets stay in the batch for the
// next one's (engine.Batcher): a list of small requests of one size leaves
// in one GSO system call.
func (s *sendState) send(w *engine.WQE) engine.Result {
	q := s.q
	if q.dead.Load() {
		return engine.Fail(verbs.WCWRFlushErr)
	}
	q.mu.Lock()
	if s.n == len(s.ring) {
		q.mu.Unlock()
		return engine.ResultStall // (the engine bounds the queue: not reached)
	}
	if completesAtPeer(w.WR.Opcode) {
		// Before the request: it may be the reply (acks.go). This QP's
		// own ACK goes with a request of one packet, in its system call
		// (two system calls per 8 B round trip instead of four, at equal
		// time); not with a longer one: sent with a batch of its
		// packets it cost 4 more context switches per 64 KiB sleeping
		// round trip with both processes on one vCPU (140-165 -> 175 us).
		if int(w.Len) <= q.path.mtu {
			q.d.takeACK(q, s.bat)
		}
		q.d.flushACKs()
	}
	e := s.at(s.n)
	*e = swqe{w: w, seq: w.Seq(), kind: kindOf(w.WR.Opcode), total: w.Len, sink: e.sink[:0]}
	st := verbs.WCSuccess
	if e.kind == kRead || e.kind == kAtomic {
		e.sink, st = q.req.Sink(w, e.sink)
	}
	if st == verbs.WCSuccess && (e.kind == kSend || e.kind == kWrite || e.kind == kAtomicWrite) {
		s.segs, st = q.req.Payload(w, s.segs[:0])
	}
	if st != verbs.WCSuccess {
		s.transmit() // what earlier requests left in the batch goes first
		q.mu.Unlock()
		return engine.Fail(st)
	}
	s.plan(e)
	s.n++
	if w.More() {
		s.fill()
	} else {
		s.transmit()
	}
	q.mu.Unlock()
	return engine.ResultPending
}

// plan sets e's current unit from its progress: a message's packets, or
// the next READ chunk.
func (s *sendState) plan(e *swqe) {
	mtu := s.q.path.mtu
	e.assigned, e.sent, e.got = false, 0, 0
	switch e.kind {
	case kSend, kWrite:
		e.npkt = max(1, (int(e.total)+mtu-1)/mtu)
		e.psns = e.npkt
	case kRead:
		e.rlen = min(e.total-e.roff, uint32(s.window()*mtu))
		e.npkt = 1
		e.psns = max(1, (int(e.rlen)+mtu-1)/mtu)
	default:
		e.npkt, e.psns = 1, 1
	}
}

// window is the window in packets of the path MTU.
func (s *sendState) window() int { return max(s.cwnd, s.minWindow()) }

// minWindow is the window a connection starts with, and its least.
func (s *sendState) minWindow() int { return max(4, windowBytes/s.q.path.mtu) }

// maxWindow is the most the window grows to.
func (s *sendState) maxWindow() int {
	return max(s.minWindow(), min(maxWindowBytes, int(s.q.d.rcvbuf.Load())/4)/s.q.path.mtu)
}

// grow widens the window after k packets were acknowledged.
func (s *sendState) grow(k int) {
	if s.cwnd < s.ssthresh {
		s.cwnd += k
	} else {
		s.cwnd++
	}
	s.cwnd = min(s.cwnd, s.maxWindow())
}

// shrink halves the window after a loss.
func (s *sendState) shrink() {
	s.cwnd = max(s.minWindow(), s.cwnd/2)
	s.ssthresh = s.cwnd
}

// transmit sends what the window allows, in order; q.mu is held.
func (s *sendState) transmit() {
	s.fill()
	s.bat.flush(s.q.d)
	s.q.d.flushACKs() // the ACKs the application's polls deferred, after its post
}

// fill builds what the window allows into the batch (which sends it as it
// fills); q.mu is held.
func (s *sendState) fill() {
	if s.rnrWait || !s.started {
		return
	}
	s.segsOf = nil // (only fill's packets use it: no need to clear it after)
	for s.tx < s.n {
		e := s.at(s.tx)
		if !e.assigned {
			e.first, e.assigned = s.npsn, true
			s.npsn = ib.PSNAdd(s.npsn, e.psns)
		}
		for e.sent < e.npkt {
			if ib.PSNDiff(s.nxt, s.una) >= int32(s.window()) {
				return
			}
			s.packet(e, e.sent)
			e.sent++
			if e.kind == kRead {
				s.nxt = ib.PSNAdd(e.first, e.psns)
			} else {
				s.nxt = ib.PSNAdd(e.first, e.sent)
			}
			if ib.PSNDiff(s.nxt, s.high) > 0 {
				s.high = s.nxt
			}
		}
		if e.kind == kRead && e.roff+e.rlen < e.total {
			return // the next chunk waits for this one's responses
		}
		s.tx++
	}
}

// packet sends packet i of e's current unit.
func (s *sendState) packet(e *swqe, i int) {
	q := s.q
	mtu := q.path.mtu
	wr := &e.w.WR
	psn := ib.PSNAdd(e.first, i)
	var b ib.Builder
	b.H = s.bat.tail()
	first, last := i == 0, i == e.npkt-1
	ack := last || (i+1)%ackEvery == 0
	off, n := i*mtu, 0
	if e.kind == kSend || e.kind == kWrite {
		n = min(mtu, int(e.total)-off)
		n = max(n, 0)
	}
	se := last && wr.Flags&verbs.SendSolicited != 0
	switch e.kind {
	case kSend:
		op := ib.SendOpcode(first, last, wr.Opcode == verbs.WRSendWithImm, wr.Opcode == verbs.WRSendWithInv)
		b.BTH(op, se, ib.Pad(n), q.path.pkey, q.path.destQPN, ack, psn)
		if op.Info().Mask&(ib.HasImm|ib.HasIETH) != 0 {
			if wr.Opcode == verbs.WRSendWithInv {
				b.Imm(wr.InvalidateRKey)
			} else {
				b.Imm(wr.ImmData)
			}
		}
	case kWrite:
		imm := wr.Opcode == verbs.WRRDMAWriteWithImm
		op := ib.WriteOpcode(first, last, imm)
		b.BTH(op, se && imm, ib.Pad(n), q.path.pkey, q.path.destQPN, ack, psn)
		if first {
			b.RETH(wr.RemoteAddr, wr.RKey, e.total)
		}
		if last && imm {
			b.Imm(wr.ImmData)
		}
	case kRead:
		// A retried chunk asks only for what has not arrived.
		skip := uint32(e.got * mtu)
		b.BTH(ib.ReadRequest, false, 0, q.path.pkey, q.path.destQPN, true, ib.PSNAdd(e.first, e.got))
		b.RETH(wr.RemoteAddr+uint64(e.roff+skip), wr.RKey, e.rlen-skip)
	case kAtomic:
		op := ib.FetchAdd
		swap, cmp := wr.CompareAdd, uint64(0)
		if wr.Opcode == verbs.WRAtomicCmpAndSwp {
			op, swap, cmp = ib.CompareSwap, wr.Swap, wr.CompareAdd
		}
		b.BTH(op, false, 0, q.path.pkey, q.path.destQPN, true, psn)
		b.AtomicETH(wr.RemoteAddr, wr.RKey, swap, cmp)
	case kFlush:
		b.BTH(ib.Flush, false, 0, q.path.pkey, q.path.destQPN, true, psn)
		sel := uint32(0) // the range, not the whole region
		b.FETH(sel<<4 | uint32(wr.FlushType)&0xF)
		b.RETH(wr.RemoteAddr, wr.RKey, wr.FlushLen)
	case kAtomicWrite:
		b.BTH(ib.AtomicWrite, false, 0, q.path.pkey, q.path.destQPN, true, psn)
		b.RETH(wr.RemoteAddr, wr.RKey, 8)
		n, off = 8, 0
	}
	if n > 0 {
		// The payload is read from the memory region as the batch is
		// built and flushed (before q.mu is let go): not copied unless
		// small (batch.addRef). Its segments are looked up once a fill
		// (per packet, the lookups were 2% of a loopback sender's time).
		if s.segsOf != e {
			s.segs, _ = q.req.Payload(e.w, s.segs[:0])
			s.segsOf = e
		}
		s.bat.addRef(q.d, q.path.dst, len(b.H), s.segs, off, n)
	} else {
		s.bat.add(q.d, q.path.dst, len(b.H))
	}
	s.armTimer()
}

// The ACK timeout is a deadline (due), which every acknowledgment that
// makes progress moves, and a timer that is not stopped and started
// again for it: when the timer fires before due it waits the rest. A
// stop and a start per ACK each woke an idle runtime thread (a timer
// heap left empty by the stop wakes the netpoller when the start
// refills it), tens of thousands of times a second.

// armTimer starts the ACK timeout when packets are outstanding and it is
// not running; q.mu is held.
func (s *sendState) armTimer() {
	if !s.due.IsZero() || s.rnrWait {
		return
	}
	if t := ackTimeout(s.q.path.timeout); t > 0 {
		s.due = time.Now().Add(t)
		if !s.timerOn {
			s.timerOn = true
			s.timer.Reset(t)
		}
	}
}

// disarm stops the ACK timeout (a pending timer finds nothing due); q.mu
// is held.
func (s *sendState) disarm() { s.due = time.Time{} }

// restartTimer restarts the ACK timeout after progress (or stops it when
// nothing is outstanding); q.mu is held.
func (s *sendState) restartTimer() {
	s.disarm()
	if ib.PSNDiff(s.nxt, s.una) > 0 {
		s.armTimer()
	}
}

// timeout is the local ACK timeout: go back to the oldest unacknowledged
// PSN, or give up after retry_cnt retries.
func (s *sendState) timeout() {
	q := s.q
	q.mu.Lock()
	s.timerOn = false
	if q.dead.Load() || s.n == 0 || s.due.IsZero() {
		q.mu.Unlock()
		return
	}
	if left := time.Until(s.due); left > 0 {
		s.timerOn = true // moved since the timer was set: the rest
		s.timer.Reset(left)
		q.mu.Unlock()
		return
	}
	s.disarm()
	if s.retries--; s.retries < 0 {
		s.fail(s.at(0), verbs.WCRetryExcErr)
		q.mu.Unlock()
		s.flushDone()
		return
	}
	s.shrink()
	s.goBack(s.una)
	q.mu.Unlock()
}

// rnrExpired resends after an RNR NAK's timer.
func (s *sendState) rnrExpired() {
	q := s.q
	q.mu.Lock()
	s.rnrWait = false
	if !q.dead.Load() {
		s.transmit()
		s.armTimer()
	}
	q.mu.Unlock()
}

// goBack resends from psn: the unit holding it resumes there, every later
// one from its start (their PSNs stay); q.mu is held.
func (s *sendState) goBack(psn uint32) {
	if d := ib.PSNDiff(s.nxt, psn); d > 0 {
		s.resent += uint64(d)
	}
	for i := range s.n {
		e := s.at(i)
		if !e.assigned {
			break
		}
		d := int(ib.PSNDiff(psn, e.first))
		switch {
		case d >= e.psns:
			continue // before psn
		case d < 0:
			e.sent = 0 // after it
			continue
		}
		if i < s.tx || s.tx == i {
			s.tx = i
		}
		if e.kind == kRead {
			e.sent = 0 // the request again, for what has not arrived
		} else {
			e.sent = d
		}
		s.nxt = psn
	}
	s.transmit()
	s.armTimer()
}

// response handles an ACK, NAK, READ response or atomic ACK (the device's
// receive lock is held).
func (s *sendState) response(p *ib.Packet) {
	q := s.q
	q.mu.Lock()
	if !s.started || s.n == 0 {
		q.mu.Unlock()
		return // a late or duplicate response
	}
	if ib.PSNDiff(p.PSN, s.high) >= 0 {
		// For a PSN not sent yet (none of ours was ever answered so):
		// forged, or from another connection's past. Taken, it would
		// acknowledge requests the responder never saw, and leave the
		// oldest unacknowledged PSN beyond the next one to send, where no
		// ACK timeout runs.
		q.mu.Unlock()
		q.d.stats.Malformed.Add(1)
		return
	}
	switch {
	case p.Op == ib.Acknowledge:
		s.ack(p)
	case p.Op == ib.AtomicAcknowledge:
		s.atomicAck(p)
	case p.Mask&ib.IsRead != 0:
		s.readResponse(p)
	}
	q.mu.Unlock()
	s.flushDone()
}

// ackUpTo completes every unit whose PSNs are all at or before psn and
// that needs no response of its own; a READ or atomic whose responses
// should have come is asked again. It reports whether it made progress.
func (s *sendState) ackUpTo(psn uint32) bool {
	progress := false
	for s.n > 0 {
		e := s.at(0)
		if !e.assigned {
			break
		}
		last := ib.PSNAdd(e.first, e.psns-1)
		if ib.PSNDiff(psn, last) < 0 {
			if ib.PSNDiff(psn, e.first) >= 0 && ib.PSNDiff(psn, s.una) >= 0 && e.kind != kRead && e.kind != kAtomic {
				s.una = ib.PSNAdd(psn, 1) // part of a long message
				if ib.PSNDiff(s.nxt, s.una) < 0 {
					s.nxt = s.una // acknowledged past where a go-back left the sending
					e.sent = int(ib.PSNDiff(s.una, e.first))
				}
				progress = true
				s.progressed()
			}
			break
		}
		if e.kind == kRead || e.kind == kAtomic {
			// Acknowledged past a READ or atomic whose response did not
			// come: it was lost; ask again.
			if s.goneBack != ib.PSNAdd(e.first, e.got)+1 {
				s.goneBack = ib.PSNAdd(e.first, e.got) + 1
				s.goBack(ib.PSNAdd(e.first, e.got))
			}
			break
		}
		s.complete(verbs.WCSuccess)
		progress = true
	}
	return progress
}

// complete finishes the oldest unit's work request with st.
func (s *sendState) complete(st verbs.WCStatus) {
	e := s.at(0)
	last := ib.PSNAdd(e.first, e.psns-1)
	s.done = append(s.done, doneWR{e.w, e.seq, st})
	e.w = nil
	clear(e.sink)
	s.head = (s.head + 1) % len(s.ring)
	s.n--
	if s.tx > 0 {
		s.tx--
	}
	s.una = ib.PSNAdd(last, 1)
	if ib.PSNDiff(s.nxt, s.una) < 0 {
		s.nxt = s.una
	}
	s.rnrLeft = int(s.q.path.rnrRetry)
	s.goneBack = 0
	s.progressed()
}

// progressed notes that the oldest unacknowledged PSN moved forward: the
// path works, so retry_cnt counts afresh from here, and a sequence NAK
// may name any PSN again.
func (s *sendState) progressed() {
	s.retries = int(s.q.path.retryCnt)
	s.nakPSN = 0
}

// fail completes the oldest work request with st; the engine then fails
// the QP, flushing the rest.
func (s *sendState) fail(e *swqe, st verbs.WCStatus) {
	s.done = append(s.done, doneWR{e.w, e.seq, st})
	s.head, s.n, s.tx = 0, 0, 0
	s.disarm()
}

// flushDone hands the finished work requests to the engine, outside
// q.mu, and sends what they released.
func (s *sendState) flushDone() {
	q := s.q
	q.mu.Lock()
	ds := s.done
	if len(ds) == 0 {
		// Nothing to hand over: keep the array (taking it would lose it,
		// and the next completion would allocate another).
		q.mu.Unlock()
		return
	}
	s.done = nil
	q.mu.Unlock()
	more := false
	for _, d := range ds {
		more = q.req.CompleteDeferred(d.w, d.seq, d.st) || more
	}
	if more {
		q.req.Transmit()
	}
	q.mu.Lock()
	if s.done == nil {
		s.done = ds[:0] // keep the array
	}
	q.mu.Unlock()
}

// ack handles an ACK or a NAK.
func (s *sendState) ack(p *ib.Packet) {
	syn := p.Syndrome
	switch syn & 0xE0 {
	case ib.SyndromeACK:
		una := s.una
		if s.ackUpTo(p.PSN) {
			if k := ib.PSNDiff(s.una, una); k > 0 {
				s.grow(int(k))
			}
			s.restartTimer()
		}
		s.transmit()
	case ib.SyndromeRNR:
		if ib.PSNDiff(p.PSN, s.una) < 0 {
			return // for a request acknowledged since: stale
		}
		s.rnrNaks++
		s.ackUpTo(ib.PSNAdd(p.PSN, -1))
		if s.n == 0 {
			return
		}
		if s.q.path.rnrRetry != 7 {
			if s.rnrLeft--; s.rnrLeft < 0 {
				s.fail(s.at(0), verbs.WCRNRRetryExcErr)
				return
			}
		}
		s.rnrWait = true // nothing goes out until the timer: goBack only sets the point
		s.disarm()
		s.goBack(p.PSN)
		s.rnrTimer.Reset(engine.RNRDelay(syn & 0x1F))
	case ib.SyndromeNAK:
		if ib.PSNDiff(p.PSN, s.una) < 0 {
			return // for a request acknowledged since: stale
		}
		s.ackUpTo(ib.PSNAdd(p.PSN, -1))
		if s.n == 0 {
			return
		}
		switch syn & 0x1F {
		case ib.NAKPSNSeq:
			if s.nakPSN == p.PSN+1 {
				return // the same NAK again (a duplicate on the wire): gone back already
			}
			s.nakPSN = p.PSN + 1
			if s.retries--; s.retries < 0 {
				s.fail(s.at(0), verbs.WCRetryExcErr)
				return
			}
			s.shrink()
			s.goBack(p.PSN)
		case ib.NAKInvalidReq:
			s.fail(s.at(0), verbs.WCRemInvReqErr)
		case ib.NAKRemAccess:
			s.fail(s.at(0), verbs.WCRemAccessErr)
		case ib.NAKInvalidRD:
			s.fail(s.at(0), verbs.WCRemInvRDReqErr)
		default:
			s.fail(s.at(0), verbs.WCRemOpErr)
		}
	}
}

// readResponse places a READ response packet.
func (s *sendState) readResponse(p *ib.Packet) {
	// Responses to a READ also acknowledge what came before it.
	for s.n > 0 && s.at(0).kind != kRead {
		e := s.at(0)
		if !e.assigned || ib.PSNDiff(p.PSN, ib.PSNAdd(e.first, e.psns-1)) <= 0 {
			return // not for the oldest READ: stale
		}
		s.complete(verbs.WCSuccess)
	}
	if s.n == 0 {
		return
	}
	e := s.at(0)
	want := ib.PSNAdd(e.first, e.got)
	switch d := ib.PSNDiff(p.PSN, want); {
	case d < 0:
		return // a duplicate
	case d > 0:
		// Responses were lost: ask again from the first missing one, once
		// for the responses in flight; and again when the missing one is
		// missing from the responses to that request too (a response for
		// a PSN seen before the request was asked again belongs to it),
		// rather than wait for the ACK timeout.
		if d < int32(e.psns) && (s.goneBack != want+1 || ib.PSNDiff(p.PSN, s.backHigh) < 0) {
			s.goneBack, s.backHigh = want+1, ib.PSNAdd(p.PSN, 1)
			s.shrink()
			s.goBack(want)
		}
		return
	}
	mtu := s.q.path.mtu
	first, last := p.Mask&ib.IsFirst != 0, p.Mask&ib.IsLast != 0
	n := len(p.Payload)
	lastPkt := e.got == e.psns-1
	// A READ asked again from a missing response is answered as a new
	// READ: its first response is a FIRST (or ONLY), where the original's
	// delayed one was a MIDDLE (or LAST); either may come first.
	switch {
	case e.got == 0 && !first, last != lastPkt,
		!last && n != mtu,
		last && e.got*mtu+n != int(e.rlen):
		s.fail(e, verbs.WCBadRespErr) // a response that does not fit the request
		return
	}
	engine.CopyInto(e.sink, int(e.roff)+e.got*mtu, p.Payload)
	e.got++
	s.una = ib.PSNAdd(p.PSN, 1)
	s.progressed()
	s.grow(1)
	if !last {
		s.restartTimer()
		return
	}
	e.roff += e.rlen
	if e.roff < e.total {
		// The next chunk: new PSNs, after everything assigned so far (the
		// READ is the last unit sent: nothing after it went out).
		s.plan(e)
		s.tx = 0
		s.npsn, s.nxt = s.una, s.una
		s.restartTimer()
		s.transmit()
		return
	}
	e.psns = e.got
	s.complete(verbs.WCSuccess)
	s.restartTimer()
	s.transmit()
}

// atomicAck takes an atomic's result.
func (s *sendState) atomicAck(p *ib.Packet) {
	s.ackUpTo(ib.PSNAdd(p.PSN, -1))
	if s.n == 0 {
		return
	}
	e := s.at(0)
	if e.kind != kAtomic || p.PSN != e.first {
		return // stale
	}
	if p.Syndrome&0xE0 != ib.SyndromeACK {
		s.ack(p)
		return
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], p.Orig) // the sink holds it in host order
	engine.CopyInto(e.sink, 0, b[:])
	e.got = 1
	s.complete(verbs.WCSuccess)
	s.restartTimer()
	s.transmit()
}
