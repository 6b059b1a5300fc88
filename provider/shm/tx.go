package shm

import (
	"encoding/binary"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"slices"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
)

// pend is a request the peer has not finished yet.
type pend struct {
	w          *engine.WQE
	seq        uint64
	start, end uint64 // its records' positions in the peer's request ring
	dst        [][]byte
}

// pendQ is a FIFO of requests waiting for their responses: a ring that
// grows when full (a send queue's worth at most) and keeps each slot's
// sink array, so that a request through the peer allocates nothing.
type pendQ struct {
	ring    []pend
	head, n int
}

func (p *pendQ) len() int { return p.n }

// push adds e, its sink copied into the slot's own array.
func (p *pendQ) push(e pend) {
	if p.n == len(p.ring) {
		ring := make([]pend, max(4, 2*len(p.ring)))
		for i := range p.n {
			ring[i] = p.ring[(p.head+i)%len(p.ring)]
		}
		p.ring, p.head = ring, 0
	}
	s := &p.ring[(p.head+p.n)%len(p.ring)]
	dst := append(s.dst[:0], e.dst...)
	*s = e
	s.dst = dst
	p.n++
}

func (p *pendQ) front() *pend { return &p.ring[p.head] }

// pop removes the oldest request; its slot keeps its sink array for the
// next use (nothing else refers to it once the response is placed).
func (p *pendQ) pop() {
	s := &p.ring[p.head]
	clear(s.dst)
	s.w, s.dst = nil, s.dst[:0]
	p.head = (p.head + 1) % len(p.ring)
	p.n--
}

type done struct {
	w   *engine.WQE
	seq uint64
	st  verbs.WCStatus
}

// txState is how far Send got with a request it had to stall.
type txState struct {
	seq   uint64
	off   uint32 // payload bytes already in the ring
	start uint64 // ring position of its first record
	busy  bool
}

// Send implements engine.Transport.
func (c *conn) Send(w *engine.WQE) engine.Result {
	if !c.enter() {
		return engine.Fail(verbs.WCWRFlushErr)
	}
	r := c.transmit(w)
	c.leave()
	return r
}

// SendDirect implements engine.DirectSender: a SEND that fits in one
// record goes into the ring straight from the caller's request when the
// ring has room and nothing is in progress, and an RDMA WRITE or READ on a
// region of the peer's that is mapped here is carried out at once
// (oneSidedDirect); anything else is declined. Declining must leave no
// trace: the ordinary path then does everything.
func (c *conn) SendDirect(w *engine.WQE, wr *verbs.SendWR, payload [][]byte, n uint32) (out, done bool) {
	switch wr.Opcode {
	case verbs.WRRDMAWrite:
		ok := c.oneSidedDirect(wr, payload, n, verbs.AccessRemoteWrite)
		return ok, ok
	case verbs.WRRDMARead:
		ok := c.oneSidedDirect(wr, payload, n, verbs.AccessRemoteRead)
		return ok, ok
	}
	// Not entered (see enter): it touches only the segments.
	if n >= refMin || c.closing.Load() || c.tx.busy || c.peerStopped() || int(n) > c.reqOut.MaxPayload() {
		return false, false
	}
	start := c.reqOut.Tail // as transmit does: a pad or rewind that reserve makes is part of the request
	c.reqOut.Rewind(c.ackHead.Load())
	b := c.reqOut.Reserve(ring.Size(int(n)))
	if b == nil {
		return false, false // no room (or a corrupt head, which the ordinary path reports)
	}
	flags, imm := msgFlags(wr)
	flags |= fFirst | fLast | c.ackFlag(w)
	c.tx = txState{seq: w.Seq(), start: start}
	ring.PutHdr(b, uint32(len(b)), recSend, flags, n, imm, 0, 0, n)
	engine.CopyFrom(b[ring.HdrLen:ring.HdrLen+n], payload, 0)
	c.expectAck(w, len(b))
	c.reqOut.Commit(len(b))
	c.nRing++
	c.nPosted++
	if c.reqOut.Publish() {
		// The poke is a socket write, which may wait for the socket's
		// lock: not under the QP's lock (DirectDone sends it).
		c.pokeOwed.Store(true)
	}
	return true, false
}

// oneSidedDirectMax is the largest WRITE or READ PostSend carries out
// itself (a microsecond or two of copying).
const oneSidedDirectMax = 64 << 10

// oneSidedDirect carries out an RDMA WRITE (need AccessRemoteWrite: local
// holds the data) or READ (AccessRemoteRead: local is the sink) from
// PostSend, as transmit does for one that direct allows, when that needs
// nothing that may wait: remoteAccess says viaMapping. It reports whether the data has moved; otherwise the ordinary
// path takes the request (and asks for the mapping, stalls, or lets the
// peer refuse it). The send queue is idle (postDirect), so no Send
// runs: like it, this is the one goroutine that uses the mappings and
// c.last. Requests larger than oneSidedDirectMax go the ordinary path,
// whose copy does not hold the QP's lock (other posters and completions do
// not wait for it), and whose own cost is small beside such a copy.
func (c *conn) oneSidedDirect(wr *verbs.SendWR, local [][]byte, n uint32, need verbs.AccessFlags) bool {
	if n == 0 || n > oneSidedDirectMax || c.tx.busy || !c.enter() {
		return false
	}
	defer c.leave()
	if c.peerStopped() {
		return false
	}
	addr := wr.RemoteAddr
	r, how := c.remoteAccess(wr.RKey, need, addr, n)
	if how != viaMapping || !r.acquire() {
		return false
	}
	if need == verbs.AccessRemoteRead {
		engine.CopyInto(local, 0, r.at(addr, n))
	} else {
		engine.CopyFrom(r.at(addr, n), local, 0)
	}
	r.release()
	c.nDirect++
	c.nPostedOneSided++
	return true
}

// DirectDone implements engine.DirectSender: the poke SendDirect owes.
func (c *conn) DirectDone() {
	if c.pokeOwed.Load() && c.pokeOwed.Swap(false) {
		c.poke()
	}
}

func (c *conn) transmit(w *engine.WQE) engine.Result {
	q := c.req
	resume := c.tx.busy && c.tx.seq == w.Seq()
	if c.peerFailed() || atomic.LoadUint64(c.peer.U64(offNakPos)) != 0 {
		// The peer consumes nothing more. The requests before this one
		// complete first (one may be the refusal, whose status must come
		// before the flush it causes); this one is the refused one if the
		// peer stopped inside it, else it never reaches the peer.
		c.checkAcks()
		nakPos := atomic.LoadUint64(c.peer.U64(offNakPos))
		if resume && nakPos != 0 && nakPos-1 >= c.tx.start {
			c.tx.busy = false
			return engine.Fail(verbs.WCStatus(atomic.LoadUint32(c.peer.U32(offNakSt))))
		}
		c.tx.busy = false
		return engine.Fail(verbs.WCRetryExcErr)
	}
	if !resume {
		c.tx = txState{seq: w.Seq(), start: c.reqOut.Tail}
	}
	wr := &w.WR
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		return c.sendMsg(w, recSend, 0, 0)
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		r, res, ok := c.direct(w, verbs.AccessRemoteWrite, wr.RemoteAddr, w.Len)
		if !ok {
			return res
		}
		if r == nil {
			return c.sendMsg(w, recWrite, wr.RKey, wr.RemoteAddr)
		}
		var st verbs.WCStatus
		if c.src, st = q.Payload(w, c.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		if !r.acquire() {
			return c.remap(r)
		}
		dst := r.at(wr.RemoteAddr, w.Len)
		off := 0
		for _, s := range c.src {
			off += copy(dst[off:], s)
		}
		r.release()
		c.nDirect++
		if wr.Opcode == verbs.WRRDMAWrite {
			return engine.ResultOK
		}
		return c.sendMsg(w, recImm, 0, 0)
	case verbs.WRRDMARead:
		dst, st := q.Sink(w, c.dst[:0])
		c.dst = dst
		if st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		r, res, ok := c.direct(w, verbs.AccessRemoteRead, wr.RemoteAddr, w.Len)
		if !ok {
			return res
		}
		if r == nil {
			return c.request(w, recReadReq, 0, dst)
		}
		if !r.acquire() {
			return c.remap(r)
		}
		engine.CopyInto(dst, 0, r.at(wr.RemoteAddr, w.Len))
		r.release()
		c.nDirect++
		return engine.ResultOK
	case verbs.WRFlush:
		// Always through the target: it is the one that can write its
		// memory back (msync) and that orders the flush after the data
		// it placed itself. It completes when the target consumed it.
		return c.ctlMsg(w, recFlush, uint32(wr.FlushType), wr.FlushLen, nil)
	case verbs.WRAtomicWrite:
		var st verbs.WCStatus
		if c.src, st = q.Payload(w, c.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		var v [8]byte
		engine.CopyFrom(v[:], c.src, 0)
		r, res, ok := c.direct8(w, verbs.AccessRemoteWrite)
		if !ok {
			return res
		}
		if r == nil || atomic.LoadUint32(c.peer.U32(offIRD)) == 0 {
			return c.ctlMsg(w, recAtomicWr, 0, 8, v[:])
		}
		if !r.acquire() {
			return c.remap(r)
		}
		stored := engine.AtomicStoreAt(r.at(wr.RemoteAddr, 8), v)
		r.release()
		if !stored {
			return c.ctlMsg(w, recAtomicWr, 0, 8, v[:])
		}
		c.nDirect++
		return engine.ResultOK
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		dst, st := q.Sink(w, c.dst[:0])
		c.dst = dst
		if st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		r, res, ok := c.direct8(w, verbs.AccessRemoteAtomic)
		if !ok {
			return res
		}
		if r == nil {
			fl := uint8(0)
			if wr.Opcode == verbs.WRAtomicCmpAndSwp {
				fl = fCAS
			}
			return c.request(w, recAtomicReq, fl, dst)
		}
		if !r.acquire() {
			return c.remap(r)
		}
		old, aligned := engine.AtomicAt(r.at(wr.RemoteAddr, 8), wr.Opcode, wr.CompareAdd, wr.Swap)
		r.release()
		c.nDirect++
		if !aligned {
			return engine.Fail(verbs.WCRemInvReqErr)
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], old) // the sink holds it in host order
		engine.CopyInto(dst, 0, b[:])
		return engine.ResultOK
	}
	return engine.Fail(verbs.WCLocQPOpErr)
}

// peerStopped reports whether the peer's QP failed or refused a request.
func (c *conn) peerStopped() bool {
	return c.peerFailed() || atomic.LoadUint64(c.peer.U64(offNakPos)) != 0
}

// peerFailed reports whether the peer's QP is in ERR (it consumes nothing).
func (c *conn) peerFailed() bool { return atomic.LoadUint32(c.peer.U32(offState)) == stateErr }

// direct decides how an RDMA operation on the peer's memory goes. It
// returns the mapped region to access directly, or nil to go through the
// peer; ok false means Send must return res now (stall for a mapping,
// or for the peer to catch up with the requests before this one).
func (c *conn) direct(w *engine.WQE, need verbs.AccessFlags, addr uint64, n uint32) (r *remote, res engine.Result, ok bool) {
	if n == 0 {
		return nil, res, true
	}
	r, how := c.remoteAccess(w.WR.RKey, need, addr, n)
	switch how {
	case viaPeer:
		return nil, res, true
	case viaUnmapped:
		return nil, c.askMap(w.WR.RKey), false
	case viaCorrupt:
		c.fail(errCorrupt)
		return nil, engine.Fail(verbs.WCWRFlushErr), false
	case viaOrder:
		return nil, c.stall(), false
	}
	return r, res, true
}

// How an access to the peer's memory can go now (remoteAccess).
const (
	viaMapping  = iota // directly in our mapping of the region
	viaPeer            // through the peer: not mappable, or refused by a check (the peer reports the error)
	viaUnmapped        // not known yet: ask the peer for the mapping
	viaOrder           // wait: requests of ours before it are still in the ring (RC order)
	viaCorrupt         // the peer's head is corrupt
)

// remoteAccess checks an access of n bytes at addr of the peer's region
// rkey, needing need, against what we know of the region, and says how it
// can go; r is the mapping when it is viaMapping.
func (c *conn) remoteAccess(rkey uint32, need verbs.AccessFlags, addr uint64, n uint32) (r *remote, how int) {
	r = c.lookup(rkey)
	if r == nil {
		return nil, viaUnmapped
	}
	// Anything the checks refuse goes through the peer, which reports the
	// error as it reports any remote error.
	if r.fallback || r.access&need != need || verbs.AccessFlags(atomic.LoadUint32(c.peer.U32(offAccess)))&need != need ||
		addr < r.base || addr-r.base > uint64(len(r.mem)) || uint64(n) > uint64(len(r.mem))-(addr-r.base) ||
		need != verbs.AccessRemoteWrite && atomic.LoadUint32(c.peer.U32(offIRD)) == 0 {
		return nil, viaPeer
	}
	// RC order: the peer executes earlier requests first.
	if c.reqOut.Tail != c.reqOut.Head {
		if c.reqOut.RefreshHead() != nil {
			return nil, viaCorrupt
		}
		if c.reqOut.Tail != c.reqOut.Head {
			return nil, viaOrder
		}
	}
	return r, viaMapping
}

// direct8 is direct for an 8-byte atomic access at the request's remote
// address; a misaligned one goes through the target, which refuses it.
func (c *conn) direct8(w *engine.WQE, need verbs.AccessFlags) (*remote, engine.Result, bool) {
	if w.WR.RemoteAddr%8 != 0 {
		return nil, engine.Result{}, true
	}
	return c.direct(w, need, w.WR.RemoteAddr, 8)
}

// stall makes Send wait until the peer consumes from its request ring.
func (c *conn) stall() engine.Result {
	c.stallAt.Store(c.reqOut.Head)
	c.stalled.Store(true)
	atomic.StoreUint32(c.reqOut.C.Wait, 1)
	if atomic.LoadUint64(c.reqOut.C.Head) != c.reqOut.Head {
		// It already did: a Resume during Send makes the engine retry.
		c.stalled.Store(false)
		c.req.Resume()
	}
	return engine.ResultStall
}

// sendMsg puts a message (SEND, WRITE through the peer, WRITE WITH IMM's
// immediate) into the peer's request ring, in pieces when it is large,
// resuming where a stall left it.
func (c *conn) sendMsg(w *engine.WQE, kind uint8, rkey uint32, addr uint64) engine.Result {
	wr := &w.WR
	total := w.Len
	flags, imm := msgFlags(wr)
	flags |= c.ackFlag(w)
	if kind == recImm {
		total = 0 // the data went directly; the record carries the length
	}
	var st verbs.WCStatus
	if total > 0 {
		if c.src, st = c.req.Payload(w, c.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
	}
	if kind == recSend && !c.tx.busy && total >= refMin && len(c.src) == 1 && wr.Inline == nil && len(wr.SGList) == 1 && c.offered(wr.SGList[0].LKey) {
		// Copied once: by the receiver, from our region, which it mapped.
		b := c.reserve(ring.HdrLen)
		if b == nil {
			return c.stall()
		}
		h := ring.Rec{Size: ring.HdrLen, Kind: recSendRef, Flags: flags | fFirst | fLast, Imm: imm, Addr: wr.SGList[0].Addr, RKey: wr.SGList[0].LKey, Total: total}
		ring.PutRec(b, h)
		c.expectAck(w, ring.HdrLen)
		c.reqOut.Commit(ring.HdrLen)
		c.nRef++
		return c.publishReq()
	}
	maxp := uint32(c.reqOut.MaxPayload())
	c.tx.busy = true
	for {
		off := c.tx.off
		n := min(maxp, total-off)
		b := c.reserve(ring.Size(int(n)))
		if b == nil {
			if c.reqOut.Publish() {
				c.poke()
			}
			return c.stall()
		}
		h := ring.Rec{Size: uint32(len(b)), Kind: kind, Flags: flags, N: n, Imm: imm, Addr: addr + uint64(off), RKey: rkey, Total: w.Len}
		if off == 0 {
			h.Flags |= fFirst
		}
		if off+n == total {
			h.Flags |= fLast
		}
		ring.PutRec(b, h)
		engine.CopyFrom(b[ring.HdrLen:ring.HdrLen+n], c.src, int(off))
		if off+n == total {
			c.expectAck(w, len(b))
		}
		c.reqOut.Commit(len(b))
		c.tx.off += n
		if c.tx.off == total {
			break
		}
	}
	c.tx.busy = false
	c.nRing++
	return c.publishReq()
}

// msgFlags returns the record flags and the immediate word a message's
// request carries (immediate data or the key to invalidate, solicited).
func msgFlags(wr *verbs.SendWR) (flags uint8, imm uint32) {
	switch wr.Opcode {
	case verbs.WRSendWithImm, verbs.WRRDMAWriteWithImm:
		flags, imm = fImm, wr.ImmData
	case verbs.WRSendWithInv:
		flags, imm = fInv, wr.InvalidateRKey
	}
	if wr.Flags&verbs.SendSolicited != 0 {
		flags |= fSolicited
	}
	return flags, imm
}

// ctlMsg puts a one-record request that completes when the peer has
// consumed (and so executed) it: FLUSH, ATOMIC_WRITE through the target.
func (c *conn) ctlMsg(w *engine.WQE, kind uint8, imm, total uint32, payload []byte) engine.Result {
	wr := &w.WR
	b := c.reserve(ring.Size(len(payload)))
	if b == nil {
		return c.stall()
	}
	h := ring.Rec{Size: uint32(len(b)), Kind: kind, Flags: fFirst | fLast | c.ackFlag(w), N: uint32(len(payload)), Imm: imm, Addr: wr.RemoteAddr, RKey: wr.RKey, Total: total}
	ring.PutRec(b, h)
	copy(b[ring.HdrLen:], payload)
	c.expectAck(w, len(b))
	c.reqOut.Commit(len(b))
	c.nRing++
	return c.publishReq()
}

// reserve is reqOut.Reserve, checking the peer's head.
func (c *conn) reserve(n int) []byte {
	c.reqOut.Rewind(c.ackHead.Load())
	b := c.reqOut.Reserve(n)
	if b == nil && c.reqOut.RefreshHead() != nil {
		c.fail(errCorrupt)
	}
	return b
}

// request sends a READ or atomic request that the peer answers.
func (c *conn) request(w *engine.WQE, kind, flags uint8, dst [][]byte) engine.Result {
	wr := &w.WR
	n := 0
	if kind == recAtomicReq {
		n = 16
	}
	b := c.reserve(ring.Size(n))
	if b == nil {
		return c.stall()
	}
	h := ring.Rec{Size: uint32(len(b)), Kind: kind, Flags: flags | fFirst | fLast, N: uint32(n), Addr: wr.RemoteAddr, RKey: wr.RKey, Total: w.Len}
	ring.PutRec(b, h)
	if kind == recAtomicReq {
		binary.NativeEndian.PutUint64(b[ring.HdrLen:], wr.CompareAdd)
		binary.NativeEndian.PutUint64(b[ring.HdrLen+8:], wr.Swap)
	}
	// Waiting for its response before the commit: the stamp makes the
	// request visible, and the response may come before this goroutine
	// runs again. The sink stays resolved until then: addResp copies it.
	c.addResp(pend{w: w, seq: w.Seq(), start: c.tx.start, end: c.reqOut.Tail + uint64(len(b)), dst: dst})
	c.reqOut.Commit(len(b))
	c.nRing++
	return c.publishReq()
}

// ackRing holds the requests that complete when the peer's head passes
// them: a single-producer (Send, which the engine runs one at a time)
// single-consumer (checkAcks, under ackMu) ring, so that neither locks. It
// never fills: each entry is a request in the send queue.
type ackRing struct {
	buf  []pend
	mask uint64
	// Written with release stores: each end only publishes (no Dekker
	// handshake between them), and a locked store behind the record just
	// written into the peer's ring would wait for that line to be taken
	// from the peer's cache.
	head, tail atomic.Uint64
}

func newAckRing(maxWR int) ackRing {
	n := 1
	for n < maxWR+1 {
		n <<= 1
	}
	return ackRing{buf: make([]pend, n), mask: uint64(n - 1)}
}

// push adds a request ending at ring position end. The entry is written
// in place, field by field: a pend built on the stack and copied would be
// read back with wide loads over narrow stores (a store-forwarding stall).
func (r *ackRing) push(w *engine.WQE, seq, start, end uint64) {
	t := r.tail.Load()
	e := &r.buf[t&r.mask]
	e.w, e.seq, e.start, e.end, e.dst = w, seq, start, end, nil
	atomicx.ReleaseU64(&r.tail, t+1)
}

// outstanding reports whether requests wait for the peer.
func (c *conn) outstanding() bool {
	return c.acks.tail.Load() != c.acks.head.Load() || c.nresp.Load() > 0
}

// ackFlag is fAck for a request whose acknowledgement someone waits for:
// a signaled one, or any once half the send queue waits for acknowledgements
// (unsignaled requests hold their slots until then).
func (c *conn) ackFlag(w *engine.WQE) uint8 {
	if w.Signaled() || c.acks.tail.Load()-c.acks.head.Load() >= uint64(c.sqCap/2) {
		return fAck
	}
	return 0
}

// expectAck records w as completing when the peer's head passes the
// record of n bytes about to be committed, its last. It comes before the
// commit: the stamp makes the record visible, and the peer may consume it
// and publish its head at once; an entry recorded after a checkAcks that
// already saw that head would wait for the head's next move, which may
// never come. An application that is not polling asks to be poked (one
// that starts to wait later arms the same flag in wake).
func (c *conn) expectAck(w *engine.WQE, n int) {
	c.acks.push(w, w.Seq(), c.tx.start, c.reqOut.Tail+uint64(n))
	if !c.polled.Load() {
		atomic.StoreUint32(c.reqOut.C.Wait, 1)
	}
}

// publishReq publishes the committed records (pokes the peer if it asked)
// for a request that completes later.
func (c *conn) publishReq() engine.Result {
	if c.reqOut.Publish() {
		c.poke()
	}
	return engine.ResultPending
}

// addResp records a request that completes with its response.
func (c *conn) addResp(e pend) {
	c.sqMu.Lock()
	c.resps.push(e)
	c.nresp.Add(1)
	c.sqMu.Unlock()
	if !c.polled.Load() {
		atomic.StoreUint32(c.reqOut.C.Wait, 1)
	}
}

// checkAcks completes the requests the peer has finished: by its head for
// those that need no response, by its nak for the one it refused, and all
// of them with RETRY_EXC_ERR when its QP failed.
func (c *conn) checkAcks() {
	// Read in the reverse order of the peer's writes (nak status, nak
	// position, state; head before all): what is seen of a later write
	// implies the earlier ones.
	// One goroutine at a time completes, so that the refused request's
	// error is what flushes the requests behind it.
	c.ackMu.Lock()
	failed := c.peerFailed()
	nakPos := atomic.LoadUint64(c.peer.U64(offNakPos))
	nakSt := verbs.WCStatus(atomic.LoadUint32(c.peer.U32(offNakSt)))
	head := atomic.LoadUint64(c.reqOut.C.Head)
	c.ackHead.Store(head)
	ring.RaceAcquire()
	c.sqMu.Lock()
	ds := c.done1[:0]
	hit := func(e *pend) bool { return nakPos != 0 && e.start <= nakPos-1 && nakPos-1 < e.end }
	for h, t := c.acks.head.Load(), c.acks.tail.Load(); h != t; h++ {
		e := &c.acks.buf[h&c.acks.mask]
		switch {
		case hit(e):
			ds = append(ds, done{e.w, e.seq, nakSt})
		case head >= e.end:
			ds = append(ds, done{e.w, e.seq, verbs.WCSuccess})
		case failed || nakPos != 0:
			ds = append(ds, done{e.w, e.seq, verbs.WCRetryExcErr})
		default:
			goto resps
		}
		atomicx.ReleaseU64(&c.acks.head, h+1)
	}
resps:
	for c.resps.len() > 0 {
		e := c.resps.front()
		switch {
		case hit(e):
			ds = append(ds, done{e.w, e.seq, nakSt})
		case failed || (nakPos != 0 && e.start > nakPos-1):
			ds = append(ds, done{e.w, e.seq, verbs.WCRetryExcErr})
		default:
			goto out
		}
		c.resps.pop()
		c.nresp.Add(-1)
	}
out:
	// The two queues were walked one after the other; complete in the order
	// the peer ended the requests: those it executed (they precede its
	// refusal), then the refused one (its error flushes the rest), then the
	// others.
	rank := func(d done) int {
		switch {
		case d.st == verbs.WCSuccess:
			return 0
		case nakPos != 0 && d.st == nakSt:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(ds, func(a, b done) int { return rank(a) - rank(b) })
	c.done1 = ds[:0]
	c.sqMu.Unlock()
	more := false
	for _, d := range ds {
		more = c.req.CompleteDeferred(d.w, d.seq, d.st) || more
	}
	c.ackMu.Unlock()
	if more {
		c.req.Transmit() // not under ackMu: Send may call checkAcks
	}
}

// checkRNR gives up on a SEND the peer holds for want of a receive once
// rnr_retry retries, min_rnr_timer apart (the peer's), would have failed:
// RNR_RETRY_EXC_ERR, the QP fails, and the peer, seeing it, drops the SEND.
// With rnr_retry 7 it waits for ever.
func (c *conn) checkRNR() {
	retry := c.req.RNRRetry()
	if retry == 7 {
		return
	}
	c.ackMu.Lock()
	pos := atomic.LoadUint64(c.peer.U64(offRNRPos))
	h, t := c.acks.head.Load(), c.acks.tail.Load()
	if pos == 0 || h == t {
		c.ackMu.Unlock()
		return
	}
	e := c.acks.buf[h&c.acks.mask]
	if pos-1 < e.start || pos-1 >= e.end {
		c.ackMu.Unlock()
		return
	}
	limit := time.Duration(retry) * engine.RNRDelay(uint8(atomic.LoadUint32(c.peer.U32(offMinRNR))))
	now := time.Now()
	if c.rnrSeq != e.seq {
		c.rnrSeq, c.rnrSince = e.seq, now
		if limit > 0 {
			// Look again when the retries would have run out, polled or not.
			if c.rnrTimer == nil {
				c.rnrTimer = time.AfterFunc(limit, c.wake)
			} else {
				c.rnrTimer.Reset(limit)
			}
		}
	}
	if now.Sub(c.rnrSince) < limit {
		c.ackMu.Unlock()
		return
	}
	atomicx.ReleaseU64(&c.acks.head, h+1)
	more := c.req.CompleteDeferred(e.w, e.seq, verbs.WCRnrRetryExcErr)
	c.ackMu.Unlock()
	if more {
		c.req.Transmit()
	}
}

// frontResp returns the oldest request waiting for a response.
func (c *conn) frontResp() (pend, bool) {
	c.sqMu.Lock()
	defer c.sqMu.Unlock()
	if c.resps.len() == 0 {
		return pend{}, false
	}
	return *c.resps.front(), true
}

// popResp completes the oldest request waiting for a response.
func (c *conn) popResp(st verbs.WCStatus) {
	c.ackMu.Lock()
	c.sqMu.Lock()
	if c.resps.len() == 0 {
		c.sqMu.Unlock()
		c.ackMu.Unlock()
		return
	}
	e := *c.resps.front()
	c.resps.pop()
	c.nresp.Add(-1)
	c.sqMu.Unlock()
	more := c.req.CompleteDeferred(e.w, e.seq, st)
	c.ackMu.Unlock()
	if more {
		c.req.Transmit()
	}
}
