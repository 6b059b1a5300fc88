package shm

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/provider/shm/internal/ring"
)

// Stats returns the connection's counters: requests it carried out
// directly in the peer's memory, requests it sent through the peer, and
// request records it served for the peer.
func (x *Conn) Stats() (direct, ring, served uint64) {
	x.c.in.mu.Lock()
	served = x.c.in.nServed
	x.c.in.mu.Unlock()
	return x.c.out.nDirect, x.c.out.nRing, served
}

// Corrupt writes a record the peer must refuse into its request ring.
func (x *Conn) Corrupt() {
	c := x.c
	if !c.enter() {
		return
	}
	defer c.leave()
	b := c.out.ring.Reserve(ring.HdrLen)
	if b == nil {
		return
	}
	ring.PutRec(b, ring.Rec{Size: 1 << 20, Kind: recSend, Flags: fFirst | fLast})
	c.out.ring.Commit(ring.HdrLen)
	c.out.ring.Publish()
	c.poke()
}

// Refs returns how many SENDs went by reference (copied once, by the receiver).
func (x *Conn) Refs() uint64 { return x.c.out.nRef }

// Unacked reports whether the connection consumed requests it has not
// acknowledged yet (the head it published is behind the one it reached).
func (x *Conn) Unacked() bool {
	x.c.in.mu.Lock()
	defer x.c.in.mu.Unlock()
	return x.c.in.req.Pub != x.c.in.req.Head
}

// Posted returns how many SENDs went into the ring straight from PostSend
// (engine.DirectWire).
func (x *Conn) Posted() uint64 { return x.c.out.nPosted }

// PostedOneSided returns how many RDMA WRITEs and READs PostSend carried
// out itself (oneSidedDirect).
func (x *Conn) PostedOneSided() uint64 { return x.c.out.nPostedOneSided }

// Retired returns how many closed connections had their retired segments
// unmapped by the cleanup.
func Retired() int64 { return ring.NRetired.Load() }

// Published reports whether the head the connection published, the one its
// peer reads, covers every request it consumed.
func (x *Conn) Published() bool {
	x.c.in.mu.Lock()
	defer x.c.in.mu.Unlock()
	return atomic.LoadUint64(x.c.in.req.C.Head) == x.c.in.req.Head
}

// OnceAfterConsume makes f run once, with the conn, the next time a poll of
// any connection consumes requests, while that poll holds the consumer's
// lock. It returns a function that removes the hook.
func OnceAfterConsume(f func(*Conn)) (restore func()) {
	var once sync.Once
	h := func(c *conn) { once.Do(func() { f(&Conn{c}) }) }
	testHookConsumed.Store(&h)
	return func() { testHookConsumed.Store(nil) }
}

// StopPolling ends polled mode as the engine's idle rule does when the
// application stopped polling.
func (x *Conn) StopPolling() { x.c.ep.EndPolledMode() }

// Debug describes the connection's progress state, for a test that gives
// up waiting: the request ring both ways, the flags of the poke protocol,
// what waits for acknowledgements or responses.
func (x *Conn) Debug() string {
	c := x.c
	if !c.enter() {
		return "closed"
	}
	defer c.leave()
	return fmt.Sprintf("out: tail %d head(peer) %d cached %d wait %d sleep(peer) %d stalled %v at %d | in: head %d pub %d peer-tail %d sleep %d wait(peer) %d held %v | polled %v acks %d resps %d",
		c.out.ring.Tail, atomic.LoadUint64(c.out.ring.C.Head), c.out.ring.Head, atomic.LoadUint32(c.out.ring.C.Wait), atomic.LoadUint32(c.out.ring.C.Sleep),
		c.out.stalled.Load(), c.out.stallAt.Load(),
		c.in.req.Head, c.in.req.Pub, atomic.LoadUint64(c.in.req.C.Tail), atomic.LoadUint32(c.in.req.C.Sleep), atomic.LoadUint32(c.in.req.C.Wait), c.in.held.Load(),
		c.polled.Load(), c.wait.acks.tail.Load()-c.wait.acks.head.Load(), c.wait.nresp.Load())
}
