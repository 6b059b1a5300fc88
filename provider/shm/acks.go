package shm

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
)

// waiting is our requests that the peer has not finished: those that
// complete when its head passes them (acks) and those that complete with
// a response (resps). mu is held while completing, sqMu guards the queues.
type waiting struct {
	mu    sync.Mutex
	sqMu  sync.Mutex
	acks  ackRing      // done when the peer's head passes them
	resps pendQ        // done when their response arrives
	nresp atomic.Int32 // resps.len(), read without the lock
	// ackHead is the peer's head when checkAcks last looked: until it
	// moves, nothing in acks can be done.
	ackHead atomic.Uint64
	// skipped: a progress that delivered left the acks for later, and none
	// has looked at them since.
	skipped atomic.Uint64
	// wantEnd is the end, in the peer's request ring, of the last request
	// whose acknowledgement someone waits for (fAck): only those make a
	// completion, or give back the send queue a poster waits for. A
	// waiter asks to be poked for acknowledgements only while the peer's
	// head has not passed it: rsocket's unsignaled messages, acknowledged
	// as the peer consumes them, woke a reader waiting for the reply once
	// more per message for nothing.
	wantEnd atomic.Uint64
	done1   []done // scratch for completions, used under sqMu

	// RNR retry: the request the peer holds for want of a receive, since when.
	rnrSeq   uint64
	rnrSince time.Time
	rnrTimer *time.Timer
}

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
	return c.wait.acks.tail.Load() != c.wait.acks.head.Load() || c.wait.nresp.Load() > 0
}

// ackWanted reports whether a request whose acknowledgement someone
// waits for may still be unacknowledged (see waiting.wantEnd).
func (c *conn) ackWanted() bool {
	return c.wait.wantEnd.Load() > c.wait.ackHead.Load()
}

// ackFlag is fAck for a request whose acknowledgement someone waits for:
// a signaled one, or any once half the send queue waits for acknowledgements
// (unsignaled requests hold their slots until then).
func (c *conn) ackFlag(w *engine.WQE) uint8 {
	if w.Signaled() || c.wait.acks.tail.Load()-c.wait.acks.head.Load() >= uint64(c.out.sqCap/2) {
		return fAck
	}
	return 0
}

// expectAck records w as completing when the peer's head passes the
// record of n bytes about to be committed, its last. It comes before the
// commit: the stamp makes the record visible, and the peer may consume it
// and publish its head at once; an entry recorded after a checkAcks that
// already saw that head would wait for the head's next move, which may
// never come. An application that is not polling asks to be poked for a
// request flagged fAck (one that starts to wait later arms the same flag
// in wake, or in Block's askPoke: one that blocks in the socket meanwhile
// is seen here); the others' acknowledgements make no completion and wait
// for the next progress.
func (c *conn) expectAck(w *engine.WQE, n int, flags uint8) {
	end := c.out.ring.Tail + uint64(n)
	c.wait.acks.push(w, w.Seq(), c.out.cur.start, end)
	if flags&fAck == 0 {
		return
	}
	c.wait.wantEnd.Store(end)
	if !c.polled.Load() || c.blocked.Load() { // a Block waits in the socket
		atomic.StoreUint32(c.out.ring.C.Wait, 1)
	}
}

// addResp records a request that completes with its response.
func (c *conn) addResp(e pend) {
	c.wait.sqMu.Lock()
	c.wait.resps.push(e)
	c.wait.nresp.Add(1)
	c.wait.sqMu.Unlock()
	if !c.polled.Load() || c.blocked.Load() {
		atomic.StoreUint32(c.out.ring.C.Wait, 1)
	}
}

// errBadStatus ends a connection whose peer refused a request with a
// status no responder gives.
var errBadStatus = errors.New("shm: peer refused a request with an undefined status")

// peerNakStatus returns the status the peer refused a request with. Only
// a responder's statuses are defined (REM_ACCESS_ERR, REM_INV_REQ_ERR,
// REM_OP_ERR); anything else is reported as REM_OP_ERR, with ok false: the
// caller ends the connection rather than hand the application a status
// that verbs does not have.
func (c *conn) peerNakStatus() (st verbs.WCStatus, ok bool) {
	switch st := verbs.WCStatus(atomic.LoadUint32(c.peer.U32(offNakSt))); st {
	case verbs.WCRemAccessErr, verbs.WCRemInvReqErr, verbs.WCRemOpErr:
		return st, true
	}
	return verbs.WCRemOpErr, false
}

// checkAcks completes the requests the peer has finished: by its head for
// those that need no response, by its nak for the one it refused, and all
// of them with RETRY_EXC_ERR when its QP failed.
func (c *conn) checkAcks() { c.checkAcksTo(nil) }

// checkAcksTo is checkAcks from a Progress: the completions may go into
// the poll's hand-off ho (engine.Requester.CompleteTo).
func (c *conn) checkAcksTo(ho *engine.Handoff) {
	// Read in the reverse order of the peer's writes (nak status, nak
	// position, state; head before all): what is seen of a later write
	// implies the earlier ones.
	// One goroutine at a time completes, so that the refused request's
	// error is what flushes the requests behind it.
	c.wait.mu.Lock()
	failed := c.peerFailed()
	nakPos := atomic.LoadUint64(c.peer.U64(offNakPos))
	if !failed && nakPos == 0 {
		c.acksDone(ho)
		return
	}
	nakSt, nakOK := c.peerNakStatus()
	head := atomic.LoadUint64(c.out.ring.C.Head)
	c.wait.ackHead.Store(head)
	ring.RaceAcquire()
	c.wait.sqMu.Lock()
	ds := c.wait.done1[:0]
	hit := func(e *pend) bool { return nakPos != 0 && e.start <= nakPos-1 && nakPos-1 < e.end }
	for h, t := c.wait.acks.head.Load(), c.wait.acks.tail.Load(); h != t; h++ {
		e := &c.wait.acks.buf[h&c.wait.acks.mask]
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
		atomicx.ReleaseU64(&c.wait.acks.head, h+1)
	}
resps:
	for c.wait.resps.len() > 0 {
		e := c.wait.resps.front()
		switch {
		case hit(e):
			ds = append(ds, done{e.w, e.seq, nakSt})
		case failed || (nakPos != 0 && e.start > nakPos-1):
			ds = append(ds, done{e.w, e.seq, verbs.WCRetryExcErr})
		default:
			goto out
		}
		c.wait.resps.pop()
		c.wait.nresp.Add(-1)
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
	if failed || nakPos != 0 { // (else every one succeeded, in order)
		slices.SortStableFunc(ds, func(a, b done) int { return rank(a) - rank(b) })
	}
	c.wait.done1 = ds[:0]
	c.wait.sqMu.Unlock()
	more := false
	for _, d := range ds {
		more = c.req.CompleteTo(d.w, d.seq, d.st, ho) || more
	}
	c.wait.mu.Unlock()
	if nakPos != 0 && !nakOK {
		c.fail(errBadStatus)
	}
	if more {
		c.req.Transmit() // not under ackMu: Send may call checkAcks
	}
}

// acksDone is checkAcksTo when the peer neither failed nor refused a
// request (read before its head, as there), the common case: the
// requests its head passed succeeded, in order, and those that wait for
// a response wait on. They complete as they are taken from the ring,
// with no list of them to sort, and without sqMu: the ring has one
// consumer (whoever holds mu), and the responses are not touched. (The
// general path's list, closures and second lock were some sixty
// instructions of an acknowledged SEND's.) It unlocks mu.
func (c *conn) acksDone(ho *engine.Handoff) {
	head := atomic.LoadUint64(c.out.ring.C.Head)
	c.wait.ackHead.Store(head)
	ring.RaceAcquire()
	a := &c.wait.acks
	more := false
	for h, t := a.head.Load(), a.tail.Load(); h != t; h++ {
		e := &a.buf[h&a.mask]
		if head < e.end {
			break
		}
		w, seq := e.w, e.seq
		atomicx.ReleaseU64(&a.head, h+1) // the slot is Send's again
		more = c.req.CompleteTo(w, seq, verbs.WCSuccess, ho) || more
	}
	c.wait.mu.Unlock()
	if more {
		c.req.Transmit() // not under mu: Send may call checkAcks
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
	c.wait.mu.Lock()
	pos := atomic.LoadUint64(c.peer.U64(offRNRPos))
	h, t := c.wait.acks.head.Load(), c.wait.acks.tail.Load()
	if pos == 0 || h == t {
		c.wait.mu.Unlock()
		return
	}
	e := c.wait.acks.buf[h&c.wait.acks.mask]
	if pos-1 < e.start || pos-1 >= e.end {
		c.wait.mu.Unlock()
		return
	}
	limit := time.Duration(retry) * engine.RNRDelay(uint8(atomic.LoadUint32(c.peer.U32(offMinRNR))))
	now := time.Now()
	if c.wait.rnrSeq != e.seq {
		c.wait.rnrSeq, c.wait.rnrSince = e.seq, now
		if limit > 0 {
			// Look again when the retries would have run out, polled or not.
			if c.wait.rnrTimer == nil {
				c.wait.rnrTimer = time.AfterFunc(limit, c.wake)
			} else {
				c.wait.rnrTimer.Reset(limit)
			}
		}
	}
	if now.Sub(c.wait.rnrSince) < limit {
		c.wait.mu.Unlock()
		return
	}
	atomicx.ReleaseU64(&c.wait.acks.head, h+1)
	more := c.req.CompleteDeferred(e.w, e.seq, verbs.WCRNRRetryExcErr)
	c.wait.mu.Unlock()
	if more {
		c.req.Transmit()
	}
}

// frontResp returns the oldest request waiting for a response.
func (c *conn) frontResp() (pend, bool) {
	c.wait.sqMu.Lock()
	defer c.wait.sqMu.Unlock()
	if c.wait.resps.len() == 0 {
		return pend{}, false
	}
	return *c.wait.resps.front(), true
}

// popResp completes the oldest request waiting for a response.
func (c *conn) popResp(st verbs.WCStatus) {
	c.wait.mu.Lock()
	c.wait.sqMu.Lock()
	if c.wait.resps.len() == 0 {
		c.wait.sqMu.Unlock()
		c.wait.mu.Unlock()
		return
	}
	e := *c.wait.resps.front()
	c.wait.resps.pop()
	c.wait.nresp.Add(-1)
	c.wait.sqMu.Unlock()
	more := c.req.CompleteDeferred(e.w, e.seq, st)
	c.wait.mu.Unlock()
	if more {
		c.req.Transmit()
	}
}
