package shm

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
)

// sender is the requester's side of the connection: what Send (one call
// at a time per QP, ordered by the engine's lock) writes into the peer's
// request ring, and the peer's regions it accesses directly.
type sender struct {
	ring  ring.Producer
	sqCap int // max_send_wr
	cur   txState
	src   [][]byte
	dst   [][]byte
	last  *remote // the last region used directly
	// What oneSidedDirect keeps between requests (see it): the region it
	// last used, held (its mapping stays) across PostSends, and the
	// accesses that its own checks allow (dStatic) and that the open
	// window's checks allowed (dLive: such a request needs only its bounds
	// checked); the window count (offDirect, our copy: the peer may write
	// the shared word), and whether a window is open. dOK is the accesses
	// whose live checks passed when the peer's version (offVer) was dVer:
	// while it stays there, a window need not read what they read.
	dHeld   *remote
	dStatic verbs.AccessFlags
	dLive   verbs.AccessFlags
	dOK     verbs.AccessFlags
	dVer    uint64
	dWin    uint64
	dOpen   bool
	words   winWords
	lane    engine.Lane // what OpenLane lends (the held region)
	stallAt atomic.Uint64
	stalled atomic.Bool // Send stalled for ring space or ordering
	// pokeOwed: SendDirect published records the peer asked to be poked for.
	pokeOwed atomic.Bool

	// Counters for tests: requests done directly, requests sent through the
	// peer, SENDs by reference, SENDs SendDirect put in the ring (also in
	// nRing), WRITEs and READs oneSidedDirect carried out (also in nDirect;
	// with those the engine carried out on the lane, added at DirectEnd).
	nDirect, nRing, nRef, nPosted, nPostedOneSided uint64
}

// winWords are the segments' words that every window of OneSided reads
// or writes, resolved once: through the segments, each was a bounds check
// and three loads. A segment stays mapped memory once retired (its words
// then read as zeros), so they stay valid for the connection's life.
type winWords struct {
	win *uint64 // ours: offDirect
	ver *uint64 // the peer's: offVer
}

// txState is how far Send got with a request it had to stall.
type txState struct {
	seq   uint64
	off   uint32 // payload bytes already in the ring
	start uint64 // ring position of its first record
	busy  bool
	kind  uint8 // the records it goes in (sendMsg)
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
// trace: the ordinary path then does everything. A SEND opens no window
// and leaves nothing for DirectEnd (engine's postSendOne does not call
// it).
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
	if n >= refMin || c.closing.Load() || c.out.cur.busy || c.peerStopped() || int(n) > c.out.ring.MaxPayload() {
		return false, false
	}
	start := c.out.ring.Tail // as transmit does: a pad or rewind that reserve makes is part of the request
	c.out.ring.Rewind(c.wait.ackHead.Load())
	b := c.out.ring.Reserve(ring.Size(int(n)))
	if b == nil {
		return false, false // no room (or a corrupt head, which the ordinary path reports)
	}
	c.out.dLive = 0 // a WRITE or READ after it waits for the peer to consume it (RC order)
	flags, imm := msgFlags(wr)
	flags |= fFirst | fLast | c.ackFlag(w)
	c.out.cur = txState{seq: w.Seq(), start: start}
	ring.PutHdr(b, uint32(len(b)), recSend, flags, n, imm, 0, 0, n)
	if len(payload) == 1 {
		engine.Copy(b[ring.HdrLen:ring.HdrLen+n], payload[0]) // in line: CopyFrom's loop was 70 instructions of 8 bytes
	} else {
		engine.CopyFrom(b[ring.HdrLen:ring.HdrLen+n], payload, 0)
	}
	c.expectAck(w, len(b), flags)
	c.out.ring.Commit(len(b))
	c.out.nRing++
	c.out.nPosted++
	// The poke carries one that a consume left (takeAckPoke).
	if owed := c.takeAckPoke(); c.out.ring.Publish() || owed {
		// The poke is a socket write, which may wait for the socket's
		// lock: not under the QP's lock (DirectDone sends it).
		c.out.pokeOwed.Store(true)
	}
	return true, false
}

// oneSidedDirectMax is the largest WRITE or READ PostSend carries out
// itself (a microsecond or two of copying).
const oneSidedDirectMax = 64 << 10

// oneSidedDirect carries out an RDMA WRITE (need AccessRemoteWrite: local
// holds the data) or READ (AccessRemoteRead: local is the sink) from
// PostSend, as transmit does for one that direct allows, when that needs
// nothing that may wait (remoteAccess would say viaMapping). It reports whether
// the data has moved; otherwise the ordinary path takes the request (and
// asks for the mapping, stalls, or lets the peer refuse it). The send
// queue is idle (postDirect), so no Send runs: like it, this is the one
// goroutine that uses the mappings and c.out.last. Requests larger than
// oneSidedDirectMax go the ordinary path, whose copy does not hold the
// QP's lock (other posters and completions do not wait for it), and whose
// own cost is small beside such a copy.
//
// It takes no count in the peer's slot, as the ordinary path does
// (acquire, release: four atomic operations, with DirectEnd's call half
// the CPU of an 8-byte WRITE posted alone). Instead, each PostSend's
// direct requests run in a window (openWindow to DirectEnd) that the peer
// sees in our segment, the requester's side of a Dekker handshake: we
// publish the window open, then check that the slot still exports the
// region; a revocation clears the slot, then waits for an open window to
// close (exports.go, revoke). One of the two sees the other: either the
// request sees the region withdrawn, or the revocation waits for it. The
// window closes with an ordinary store, so a PostSend pays for one
// atomic operation, and a revocation waits for at most the rest of one
// PostSend's list, a few copies of at most oneSidedDirectMax, never for
// an idle requester.
//
// The mapping stays held (remote.hold) from one PostSend to the next, so
// that it is not unmapped under a copy; it is dropped when another region
// is used, when the window's checks find it withdrawn or discarded, and
// when the QP leaves RTS (Shutdown, under the QP's lock, which every
// window holds). It does not enter the connection (see enter): the
// segments' words it reads stay valid memory once retired. The checks of
// the region itself (mappable, its access flags) are made once for the
// region held (holdRegion); those that can change (the peer's state and
// access flags, our ring being empty, the slot) once per window and kind
// of access (live); every request's bounds, always.
func (c *conn) oneSidedDirect(wr *verbs.SendWR, local [][]byte, n uint32, need verbs.AccessFlags) bool {
	if n == 0 {
		return false
	}
	addr := wr.RemoteAddr
	r := c.directAt(wr.RKey, addr, n, need)
	if r == nil {
		return false
	}
	if need == verbs.AccessRemoteRead {
		engine.CopyInto(local, 0, r.at(addr, n))
	} else {
		engine.CopyFrom(r.at(addr, n), local, 0)
	}
	c.out.nDirect++
	c.out.nPostedOneSided++
	return true
}

// OneSided implements engine.DirectSender: oneSidedDirect for a request
// of one segment. With last, it ends the window (as DirectEnd).
//
// The commonest request, on the region held, gets its checks here, in
// line: the ones that change (live's) read in this window when it is the
// window's first; the calls that they took (directAt, live) were a fifth
// of an 8-byte WRITE's CPU. Anything else, or a check that fails, goes
// to directAt, which makes them all again and says what to do. The
// bounds are checked once, on the offset that slices the mapping, and
// the window closes here rather than in a call to DirectEnd: each was
// some twenty instructions of an 8-byte WRITE's ~450.
func (c *conn) OneSided(wr *verbs.SendWR, local []byte, last bool) bool {
	o := &c.out
	need := verbs.AccessRemoteWrite
	if wr.Opcode == verbs.WRRDMARead {
		need = verbs.AccessRemoteRead
	}
	if !o.dOpen {
		c.openWindow()
	}
	// Each check its own branch to oneSidedSlow: as one expression with
	// nested ||s, Go computed and tested a boolean per group (some forty
	// instructions more).
	n := uint64(len(local))
	r := o.dHeld
	if r == nil || r.rkey != wr.RKey || o.dStatic&need == 0 || n > oneSidedDirectMax || o.cur.busy {
		return c.oneSidedSlow(wr, local, need, last)
	}
	// The bounds on the offsets that slice the mapping: an address below
	// the region wraps past its end (and end past it, or below off).
	off := wr.RemoteAddr - r.base
	end := off + n
	if end < off || end > uint64(len(r.mem)) {
		return c.oneSidedSlow(wr, local, need, last)
	}
	if o.dLive&need == 0 {
		// The window's first request of the kind: live's checks, when
		// the peer's version, read after the window opened, has moved
		// since they last passed (or ours may have changed: closing, the
		// ring, the mapping); else they stand.
		if o.dOK&need == 0 || atomic.LoadUint64(o.words.ver) != o.dVer || c.closing.Load() ||
			o.ring.Tail != o.ring.Head || r.refs.Load()&remDead != 0 {
			return c.oneSidedSlow(wr, local, need, last)
		}
		o.dLive |= need
	}
	// oneSidedCopy and closeWindow, in line (as calls, twenty-odd
	// instructions of the request's).
	if h := testHookInWindow.Load(); h != nil {
		(*h)()
	}
	if dst := r.mem[off:end:end]; need == verbs.AccessRemoteRead {
		engine.Copy(local, dst)
	} else {
		engine.Copy(dst, local)
	}
	o.nDirect++
	o.nPostedOneSided++
	if last {
		o.dLive = 0
		o.dOpen = false
		o.dWin++
		ring.RaceRelease()
		atomicx.Release64(o.words.win, o.dWin)
	}
	return true
}

// oneSidedCopy moves a direct request's data: into the peer's memory dst
// from local for a WRITE, the other way for a READ.
func (c *conn) oneSidedCopy(dst, local []byte, need verbs.AccessFlags) {
	if h := testHookInWindow.Load(); h != nil {
		(*h)()
	}
	if need == verbs.AccessRemoteRead {
		engine.Copy(local, dst)
	} else {
		engine.Copy(dst, local)
	}
	c.out.nDirect++
	c.out.nPostedOneSided++
}

// closeWindow is DirectEnd's work with nothing on a lane: a release store,
// so that what the window wrote is visible before the peer sees it closed.
func (c *conn) closeWindow() {
	o := &c.out
	o.dLive = 0
	o.dOpen = false
	o.dWin++
	ring.RaceRelease()
	atomicx.Release64(o.words.win, o.dWin)
}

// oneSidedSlow is OneSided when a check of its fast path fails: directAt
// makes them all again and says whether the request goes directly.
func (c *conn) oneSidedSlow(wr *verbs.SendWR, local []byte, need verbs.AccessFlags, last bool) bool {
	n := uint32(len(local))
	r := c.directAt(wr.RKey, wr.RemoteAddr, n, need)
	if r != nil {
		c.oneSidedCopy(r.at(wr.RemoteAddr, n), local, need)
	}
	if last {
		c.closeWindow()
	}
	return r != nil
}

// testHookInWindow, when a test sets it, runs in OneSided's window after
// the checks, before the copy.
var testHookInWindow atomic.Pointer[func()]

// directAt returns the region to access n > 0 bytes at addr of directly,
// held, in the open window (it opens it), or nil when the request must
// take the ordinary path.
func (c *conn) directAt(rkey uint32, addr uint64, n uint32, need verbs.AccessFlags) *remote {
	if n > oneSidedDirectMax || c.out.cur.busy {
		return nil
	}
	if !c.out.dOpen {
		c.openWindow()
	}
	r := c.out.dHeld
	if r == nil || r.rkey != rkey || c.out.dStatic&need != need {
		if r = c.holdRegion(rkey, need); r == nil {
			return nil
		}
	}
	if !r.contains(addr, n) {
		return nil // through the peer, which reports the error
	}
	if c.out.dLive&need != need && !c.live(r, need) {
		return nil
	}
	return r
}

// openWindow opens the window of oneSidedDirect: the count goes odd in
// our segment, with a sequentially consistent store (on amd64 an XCHG, a
// full fence), so that the checks after it (live) read the peer's slots
// after the peer can see it.
func (c *conn) openWindow() {
	c.out.dWin++
	atomic.StoreUint64(c.out.words.win, c.out.dWin)
	c.out.dOpen = true
}

// holdRegion makes the peer's region rkey the one oneSidedDirect holds,
// if we map it and it allows need (what does not change while it is
// mapped); nil sends the request the ordinary path (which asks for the
// mapping, or lets the peer refuse the access).
func (c *conn) holdRegion(rkey uint32, need verbs.AccessFlags) *remote {
	r := c.lookup(rkey)
	if r == nil || r.fallback || r.access&need != need {
		return nil
	}
	if c.out.dHeld != r {
		c.dropHeld()
		if !r.hold() {
			return nil
		}
		c.out.dHeld = r
	}
	c.out.dStatic |= need
	return r
}

// live is the checks of a direct access to the held region r that can
// change from one window to the next (remoteAccess's, and the
// handshake's): once they pass, the rest of the window's requests of the
// kind on r need only their bounds checked (they hold for a list as they
// would for one request).
//
// Those that read the peer's words (its state, NAK, access flags, IRD,
// and the slot: the handshake's check) stand until the peer's version
// moves (offVer; the peer bumps it after changing any of them, and
// revoke after clearing a slot, before it reads our window). The version
// is read first, after the window opened: a change after the read moves
// it past the value recorded here, and the next window checks again. A
// version found unmoved stands for the slot's check in the handshake:
// the revocation that bumps it afterwards reads our window open.
func (c *conn) live(r *remote, need verbs.AccessFlags) bool {
	o := &c.out
	v := atomic.LoadUint64(o.words.ver)
	if o.dOK&need == need && v == o.dVer && !c.closing.Load() && o.ring.Tail == o.ring.Head && r.refs.Load()&remDead == 0 {
		o.dLive |= need
		return true
	}
	if c.closing.Load() || c.peerStopped() ||
		verbs.AccessFlags(atomic.LoadUint32(c.peer.U32(offAccess)))&need != need ||
		need != verbs.AccessRemoteWrite && atomic.LoadUint32(c.peer.U32(offIRD)) == 0 {
		return false
	}
	// RC order: the peer executes earlier requests first. (A corrupt head
	// the ordinary path reports.)
	if c.out.ring.Tail != c.out.ring.Head && (c.out.ring.RefreshHead() != nil || c.out.ring.Tail != c.out.ring.Head) {
		return false
	}
	// Read after the window opened (the handshake's check). A discarded
	// mapping is not used for new requests either: the ordinary path
	// finds out why (a revocation: it asks again).
	if !r.exported() || r.refs.Load()&remDead != 0 {
		c.dropHeld()
		return false
	}
	if v != o.dVer {
		o.dVer, o.dOK = v, 0 // what passed before was checked at another version
	}
	o.dOK |= need
	o.dLive |= need
	return true
}

// dropHeld lets go of the region oneSidedDirect keeps.
func (c *conn) dropHeld() {
	if r := c.out.dHeld; r != nil {
		c.out.dHeld = nil
		c.out.dStatic, c.out.dLive, c.out.dOK = 0, 0, 0
		c.out.lane.Mem, c.out.lane.Need = nil, 0 // no longer ours to lend
		r.drop()
	}
}

// OpenLane implements engine.LaneSender: the held region, when directAt
// would take a request on it (its bounds aside), opening the window.
func (c *conn) OpenLane(rkey uint32, need verbs.AccessFlags) *engine.Lane {
	if c.out.cur.busy {
		return nil
	}
	if !c.out.dOpen {
		c.openWindow()
	}
	r := c.out.dHeld
	if r == nil || r.rkey != rkey || c.out.dStatic&need != need {
		if r = c.holdRegion(rkey, need); r == nil {
			return nil
		}
	}
	if c.out.dLive&need != need && !c.live(r, need) {
		return nil
	}
	l := &c.out.lane
	l.RKey, l.Base, l.Mem, l.Need, l.Max = r.rkey, r.base, r.mem, c.out.dLive&c.out.dStatic, oneSidedDirectMax
	l.Hook = nil
	if h := testHookInWindow.Load(); h != nil {
		l.Hook = *h
	}
	return l
}

// DirectEnd implements engine.DirectSender: the end of a PostSend's
// direct requests closes their window. A release store: what the window
// wrote is visible before the peer sees it closed.
func (c *conn) DirectEnd() {
	if n := c.out.lane.N; n != 0 {
		c.out.lane.N = 0
		c.out.nDirect += n
		c.out.nPostedOneSided += n
	}
	c.out.lane.Need = 0
	c.out.dLive = 0
	if c.out.dOpen {
		c.out.dOpen = false
		c.out.dWin++
		ring.RaceRelease()
		atomicx.Release64(c.mine.U64(offDirect), c.out.dWin)
	}
}

// DirectDone implements engine.DirectSender: the poke SendDirect owes.
func (c *conn) DirectDone() {
	if c.out.pokeOwed.Load() && c.out.pokeOwed.Swap(false) {
		c.poke()
	}
}

func (c *conn) transmit(w *engine.WQE) engine.Result {
	q := c.req
	resume := c.out.cur.busy && c.out.cur.seq == w.Seq()
	if c.peerFailed() || atomic.LoadUint64(c.peer.U64(offNakPos)) != 0 {
		// The peer consumes nothing more. The requests before this one
		// complete first (one may be the refusal, whose status must come
		// before the flush it causes); this one is the refused one if the
		// peer stopped inside it, else it never reaches the peer.
		c.checkAcks()
		nakPos := atomic.LoadUint64(c.peer.U64(offNakPos))
		if resume && nakPos != 0 && nakPos-1 >= c.out.cur.start {
			c.out.cur.busy = false
			st, ok := c.peerNakStatus()
			if !ok {
				c.close(errBadStatus) // the QP fails with st: the engine flushes the rest
			}
			return engine.Fail(st)
		}
		c.out.cur.busy = false
		return engine.Fail(verbs.WCRetryExcErr)
	}
	if !resume {
		c.out.cur = txState{seq: w.Seq(), start: c.out.ring.Tail}
	}
	wr := &w.WR
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		return c.sendMsg(w, recSend, 0, 0)
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		if resume && c.out.cur.busy {
			// Resumed inside the records it started: on in them, even if
			// the mapping came or the ring emptied meanwhile (the direct
			// way would place the message a second time).
			if c.out.cur.kind == recImm {
				return c.sendMsg(w, recImm, 0, 0)
			}
			return c.sendMsg(w, recWrite, wr.RKey, wr.RemoteAddr)
		}
		r, res, ok := c.direct(w, verbs.AccessRemoteWrite, wr.RemoteAddr, w.Len)
		if !ok {
			return res
		}
		if r == nil {
			return c.sendMsg(w, recWrite, wr.RKey, wr.RemoteAddr)
		}
		var st verbs.WCStatus
		if c.out.src, st = q.Payload(w, c.out.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		if !r.acquire() {
			return c.remap(r)
		}
		dst := r.at(wr.RemoteAddr, w.Len)
		off := 0
		for _, s := range c.out.src {
			off += copy(dst[off:], s)
		}
		r.release()
		c.out.nDirect++
		if wr.Opcode == verbs.WRRDMAWrite {
			return engine.ResultOK
		}
		return c.sendMsg(w, recImm, 0, 0)
	case verbs.WRRDMARead:
		dst, st := q.Sink(w, c.out.dst[:0])
		c.out.dst = dst
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
		c.out.nDirect++
		return engine.ResultOK
	case verbs.WRFlush:
		// Always through the target: it is the one that can write its
		// memory back (msync) and that orders the flush after the data
		// it placed itself. It completes when the target consumed it.
		return c.ctlMsg(w, recFlush, uint32(wr.FlushType), wr.FlushLen, nil)
	case verbs.WRAtomicWrite:
		var st verbs.WCStatus
		if c.out.src, st = q.Payload(w, c.out.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		var v [8]byte
		engine.CopyFrom(v[:], c.out.src, 0)
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
		c.out.nDirect++
		return engine.ResultOK
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		dst, st := q.Sink(w, c.out.dst[:0])
		c.out.dst = dst
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
		c.out.nDirect++
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
// peer; ok false means Send must return res now (stall for the peer to
// catch up with the requests before this one).
//
// A region not mapped yet is asked for, and meanwhile the requests of up
// to oneSidedDirectMax bytes go through the peer: the answer comes over
// the socket, which costs a goroutine's wake-up on each side (tens of
// microseconds on a small VM), and up to the runtime's 10 ms network poll
// when every CPU busy-polls (a process whose goroutines poll both ends),
// while the peer's poll consumes the ring at once. (Stalling for it made a
// short stream of 8-byte WRITEs wait 10 to 40 ms for its first one.) A
// larger request waits for the mapping: through the ring its bytes would
// be copied twice. The same sizes go through the peer when requests of
// ours are still in the ring (RC order); larger ones wait for them.
func (c *conn) direct(w *engine.WQE, need verbs.AccessFlags, addr uint64, n uint32) (r *remote, res engine.Result, ok bool) {
	if n == 0 {
		return nil, res, true
	}
	r, how := c.remoteAccess(w.WR.RKey, need, addr, n)
	switch how {
	case viaPeer:
		return nil, res, true
	case viaUnmapped:
		if !c.askMap(w.WR.RKey) {
			return nil, engine.Fail(verbs.WCWRFlushErr), false
		}
		if n > oneSidedDirectMax {
			return nil, engine.ResultStall, false // installMap resumes it
		}
		return nil, res, true
	case viaCorrupt:
		c.fail(errCorrupt)
		return nil, engine.Fail(verbs.WCWRFlushErr), false
	case viaOrder:
		if n <= oneSidedDirectMax {
			// Through the ring, behind the requests before it, rather
			// than waiting until the peer has consumed them: a stream of
			// WRITE WITH IMMEDIATEs (each one's immediate a record) went
			// one at a time, the peer poking us for each (rsocket over
			// shm: 3.4 us per 64-byte message, 0.3 through the ring).
			return nil, res, true
		}
		return nil, c.stall(), false
	}
	return r, res, true
}

// How an access to the peer's memory can go now (remoteAccess).
const (
	viaMapping  = iota // directly in our mapping of the region
	viaPeer            // through the peer: not mappable, or refused by a check (the peer reports the error)
	viaUnmapped        // not known yet: ask the peer for the mapping (and go through it meanwhile)
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
		!r.contains(addr, n) ||
		need != verbs.AccessRemoteWrite && atomic.LoadUint32(c.peer.U32(offIRD)) == 0 {
		return nil, viaPeer
	}
	// RC order: the peer executes earlier requests first.
	if c.out.ring.Tail != c.out.ring.Head {
		if c.out.ring.RefreshHead() != nil {
			return nil, viaCorrupt
		}
		if c.out.ring.Tail != c.out.ring.Head {
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
	c.out.stallAt.Store(c.out.ring.Head)
	c.out.stalled.Store(true)
	atomic.StoreUint32(c.out.ring.C.Wait, 1)
	if atomic.LoadUint64(c.out.ring.C.Head) != c.out.ring.Head {
		// It already did: a Resume during Send makes the engine retry.
		c.out.stalled.Store(false)
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
		if c.out.src, st = c.req.Payload(w, c.out.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
	}
	if kind == recSend && !c.out.cur.busy && total >= refMin && len(c.out.src) == 1 && wr.Inline == nil && len(wr.SGList) == 1 && c.offered(wr.SGList[0].LKey) {
		// Copied once: by the receiver, from our region, which it mapped.
		b := c.reserve(ring.HdrLen)
		if b == nil {
			return c.stall()
		}
		h := ring.Rec{Size: ring.HdrLen, Kind: recSendRef, Flags: flags | fFirst | fLast, Imm: imm, Addr: wr.SGList[0].Addr, RKey: wr.SGList[0].LKey, Total: total}
		ring.PutRec(b, h)
		c.expectAck(w, ring.HdrLen, h.Flags)
		c.out.ring.Commit(ring.HdrLen)
		c.out.nRef++
		return c.publishReq()
	}
	maxp := uint32(c.out.ring.MaxPayload())
	c.out.cur.busy = true
	c.out.cur.kind = kind
	for {
		off := c.out.cur.off
		n := min(maxp, total-off)
		b := c.reserve(ring.Size(int(n)))
		if b == nil {
			if owed := c.takeAckPoke(); c.out.ring.Publish() || owed {
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
		engine.CopyFrom(b[ring.HdrLen:ring.HdrLen+n], c.out.src, int(off))
		if off+n == total {
			c.expectAck(w, len(b), h.Flags)
		}
		c.out.ring.Commit(len(b))
		c.out.cur.off += n
		if c.out.cur.off == total {
			break
		}
	}
	c.out.cur.busy = false
	c.out.nRing++
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
	c.expectAck(w, len(b), h.Flags)
	c.out.ring.Commit(len(b))
	c.out.nRing++
	return c.publishReq()
}

// reserve is reqOut.Reserve, checking the peer's head.
func (c *conn) reserve(n int) []byte {
	c.out.ring.Rewind(c.wait.ackHead.Load())
	b := c.out.ring.Reserve(n)
	if b == nil {
		if h := testHookReserveFailed.Load(); h != nil {
			(*h)()
		}
		if c.out.ring.CheckHead() != nil {
			c.fail(errCorrupt)
		}
	}
	return b
}

// testHookReserveFailed, when a test sets it, runs after a Reserve found
// no room, before the stall.
var testHookReserveFailed atomic.Pointer[func()]

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
	c.addResp(pend{w: w, seq: w.Seq(), start: c.out.cur.start, end: c.out.ring.Tail + uint64(len(b)), dst: dst})
	c.out.ring.Commit(len(b))
	c.out.nRing++
	return c.publishReq()
}

// publishReq publishes the committed records (pokes the peer if it asked)
// for a request that completes later.
func (c *conn) publishReq() engine.Result {
	if owed := c.takeAckPoke(); c.out.ring.Publish() || owed {
		c.poke()
	}
	return engine.ResultPending
}
