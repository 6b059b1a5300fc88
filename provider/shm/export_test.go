package shm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
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
	h := func(c *conn) { once.Do(func() { f(&Conn{c: c}) }) }
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

// The hooks below let a test act as a hostile peer through the connection
// x (its side of the connection does what no correct peer does).

// Failed returns why the connection ended, or nil while it lives.
func (x *Conn) Failed() error {
	if x.c.isDying() {
		return x.c.err
	}
	return nil
}

// NewMemfd returns a sealed memfd of n bytes, as a peer offers.
func NewMemfd(n int) (int, error) {
	s, fd, err := ring.Create(n)
	if err != nil {
		return -1, err
	}
	s.Unmap()
	return fd, nil
}

// SendMapping sends the peer a mapping of key over the memfd fd (n bytes at
// offset 0, slot 0, generation gen): an offer of a SEND source, or an
// answer to a mapping request that was never made.
func (x *Conn) SendMapping(offer bool, key uint32, fd int, n uint64, gen uint64) error {
	var rep [mapRepLen]byte
	rep[0] = msgMapRep
	if offer {
		rep[2] = 1
	}
	binary.LittleEndian.PutUint32(rep[4:], key)
	binary.LittleEndian.PutUint32(rep[12:], uint32(verbs.AccessRemoteRead|verbs.AccessRemoteWrite))
	binary.LittleEndian.PutUint64(rep[16:], gen)
	binary.LittleEndian.PutUint64(rep[32:], n)
	err := x.c.sendSock(rep[:], unix.UnixRights(fd))
	return err
}

// SetSlot0 writes export slot 0 of this side's segment, which the peer reads.
func (x *Conn) SetSlot0(v uint64) { atomic.StoreUint64(x.c.mine.slot(0), v) }

// SlotValid is the valid bit of an export slot, GenShift its generation's place.
const (
	SlotValid = slotValid
	GenShift  = slotGenShift
)

// AskMapping asks the peer for a mapping of key, as Send does before an
// RDMA operation on a region not mapped yet.
func (x *Conn) AskMapping(key uint32) { x.c.askMap(key) }

// Mapped says what this side knows of the peer's region key: whether the
// peer answered, and whether it handed over a mapping.
func (x *Conn) Mapped(key uint32) (answered, mapped bool) {
	x.c.remotes.mu.Lock()
	defer x.c.remotes.mu.Unlock()
	r := x.c.remotes.rdma[key]
	return r != nil, r != nil && !r.fallback
}

// HoldExports counts an access in progress in every slot this side
// exports, as a peer stopped in the middle of an access would leave it.
func (x *Conn) HoldExports() int {
	c := x.c
	c.exp.mu.Lock()
	defer c.exp.mu.Unlock()
	n := 0
	for i, e := range c.exp.slots {
		if e != nil {
			atomic.AddUint64(c.mine.slot(i), 1)
			n++
		}
	}
	return n
}

// InjectRef writes into the peer's request ring a SEND by reference to
// the region key (which this side need not have offered).
func (x *Conn) InjectRef(key uint32, total uint32) {
	c := x.c
	if !c.enter() {
		return
	}
	defer c.leave()
	b := c.out.ring.Reserve(ring.HdrLen)
	if b == nil {
		return
	}
	ring.PutRec(b, ring.Rec{Size: ring.HdrLen, Kind: recSendRef, Flags: fFirst | fLast, RKey: key, Total: total})
	c.out.ring.Commit(ring.HdrLen)
	c.out.ring.Publish()
	c.poke()
}

// RefuseNext refuses the next request in this side's request ring with
// the status word st, as a responder's nak, and pokes the peer.
func (x *Conn) RefuseNext(st uint32) {
	c := x.c
	c.in.mu.Lock()
	atomic.StoreUint32(c.mine.U32(offNakSt), st)
	atomic.StoreUint64(c.mine.U64(offNakPos), c.in.req.Head+1)
	c.mine.moved()
	c.in.mu.Unlock()
	c.poke()
}

// OpenWindow leaves this side's direct window open, as a peer stopped in
// the middle of a direct WRITE would: the peer's revocations wait for it.
func (x *Conn) OpenWindow() { atomic.StoreUint64(x.c.mine.U64(offDirect), 1) }

// HoldsDirect says whether this side's direct path holds a region of the
// peer's between PostSends; to be called by the goroutine that posts.
func (x *Conn) HoldsDirect() bool { return x.c.out.dHeld != nil }

// InWindow makes f run in every direct WRITE or READ's window, after its
// checks and before its copy (OneSided); RevokeWaits makes g run when a
// revocation finds the peer's window open. It returns a function that
// removes the hooks.
func InWindow(f, g func()) (restore func()) {
	testHookInWindow.Store(&f)
	testHookRevokeWaits.Store(&g)
	return func() {
		testHookInWindow.Store(nil)
		testHookRevokeWaits.Store(nil)
	}
}

// OnReserveFailed runs f after a Reserve of the request ring found no
// room, before the sender stalls; the returned func removes it.
func OnReserveFailed(f func()) (undo func()) {
	testHookReserveFailed.Store(&f)
	return func() { testHookReserveFailed.Store(nil) }
}

// PeerTookAll reports whether the peer's published head is at our request
// ring's tail (call it from the sending goroutine).
func (x *Conn) PeerTookAll() bool {
	return atomic.LoadUint64(x.c.out.ring.C.Head) == x.c.out.ring.Tail
}

// OnAccepted runs f in Request.Accept after the accept is sent, before the
// connection starts; the returned func removes it.
func OnAccepted(f func()) (undo func()) {
	testHookAccepted.Store(&f)
	return func() { testHookAccepted.Store(nil) }
}

// Pokes returns how many pokes the connection sent.
func (x *Conn) Pokes() uint64 { return x.c.nPokes.Load() }

// OnRxDeadline runs f in the socket goroutine when its read ends at a
// deadline (a Block made it step aside, or a poll kicked it), with the
// socket's lock held, until undo.
func OnRxDeadline(f func()) (undo func()) {
	testHookRxDeadline.Store(&f)
	return func() { testHookRxDeadline.Store(nil) }
}

// SockFD returns the connection's socket.
func (x *Conn) SockFD() int { return x.c.sfd }

// Warm reports whether the connection's socket has its warm-up
// registration (warmUp).
func (x *Conn) Warm() bool { return x.c.warm != nil }
