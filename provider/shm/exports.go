package shm

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
)

// exports is our regions that the peer maps, each in a slot of our
// segment that counts the peer's accesses in progress.
//
// Only a region whose registration grants remote read and remote write is
// mapped by the peer: a mapping can be read and written, so for any other
// region (local only, read only, write or atomic only) the peer goes
// through us and each access is checked against the registration. A peer
// that keeps asking for keys that name no region of the connection's PD
// (maxBadAsks) is guessing keys: its connection ends (errKeyGuess).
type exports struct {
	mu      sync.Mutex
	slots   []*export
	offers  map[uint32]*export // our SEND sources offered to the peer (nil: not mappable)
	dead    bool
	badAsks int
}

// maxBadAsks is how many mapping requests for keys that name no region
// a peer may make (a deregistered region it still used, a race) before its
// connection ends.
const maxBadAsks = 16

// errKeyGuess ends a connection whose peer keeps asking for keys that do
// not exist.
var errKeyGuess = errors.New("shm: peer asked for too many memory keys that do not exist")

// mappable is the access a region must grant for the peer to map it.
const mappable = verbs.AccessRemoteRead | verbs.AccessRemoteWrite

// export is one of our regions the peer maps.
type export struct {
	i      int
	gen    uint64
	key    uint32
	cancel func()
}

// offered reports whether the peer has (or is being sent) a mapping of our
// region lkey, so that a SEND from it can go by reference. The first time
// a key is seen the mapping is offered, and the SEND goes through the ring:
// the offer travels on the socket, and a receiver that meets a reference
// before the offer waits for it.
func (c *conn) offered(lkey uint32) bool {
	c.exp.mu.Lock()
	e, seen := c.exp.offers[lkey]
	c.exp.mu.Unlock()
	if seen {
		return e != nil
	}
	rep, oob, fd, e := c.exportMap(lkey, true)
	c.exp.mu.Lock()
	c.exp.offers[lkey] = e // nil: not mappable, never offered again
	c.exp.mu.Unlock()
	if e == nil {
		return false
	}
	err := c.sendSock(rep[:], oob)
	unix.Close(fd)
	if err != nil {
		c.fail(err)
	} else {
		c.sentSockMsg()
	}
	return false
}

// serveMap answers a peer's askMap: the memfd of a region registered over
// a verbs.AllocBuffer, with a slot that revocation clears, or "go through
// me" for anything else (memory that is no memfd, an unknown key, a region
// of another PD: the request path then reports the error).
func (c *conn) serveMap(msg []byte) {
	if len(msg) != 8 {
		c.fail(errProto)
		return
	}
	rkey := binary.LittleEndian.Uint32(msg[4:])
	if _, f := c.resp.Region(rkey); f != engine.FaultNone {
		c.exp.mu.Lock()
		c.exp.badAsks++
		guess := c.exp.badAsks > maxBadAsks
		c.exp.mu.Unlock()
		if guess {
			c.fail(errKeyGuess)
			return
		}
	}
	rep, oob, fd, _ := c.exportMap(rkey, false)
	err := c.sendSock(rep[:], oob)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		c.fail(err)
	} else {
		c.sentSockMsg()
	}
}

// exportMap prepares the answer to a mapping request for rkey (or, with
// offer, the unsolicited mapping of one of our SEND sources): with the
// memfd and a fresh slot when the region can be mapped, else "go through
// me".
func (c *conn) exportMap(rkey uint32, offer bool) (rep [mapRepLen]byte, oob []byte, fd int, exp *export) {
	rep[0], rep[1] = msgMapRep, 1
	if offer {
		rep[2] = 1
	}
	binary.LittleEndian.PutUint32(rep[4:], rkey)
	fd = -1
	if c.noDirect {
		return rep, nil, fd, nil
	}
	if mr, f := c.resp.Region(rkey); f == engine.FaultNone && mr.Access()&mappable == mappable {
		if buf, off := mr.Buffer(); buf != nil && buf.Fd() >= 0 {
			// The buffer is still indexed after the dup, so the dup is of
			// its memfd (Free unindexes before it closes the fd).
			if d, err := unix.Dup(buf.Fd()); err == nil {
				if _, serr := ring.SealedSize(d); serr == nil && verbs.BufferOf(mr.Bytes()) == buf {
					fd = d // (a memfd without seals is not offered: the peer would refuse it)
				} else {
					unix.Close(d)
				}
			}
			if fd >= 0 {
				if e := c.newExport(); e != nil {
					rep[1] = 0
					binary.LittleEndian.PutUint32(rep[8:], uint32(e.i))
					binary.LittleEndian.PutUint32(rep[12:], uint32(mr.Access()))
					binary.LittleEndian.PutUint64(rep[16:], e.gen)
					binary.LittleEndian.PutUint64(rep[24:], mr.Addr())
					binary.LittleEndian.PutUint64(rep[32:], uint64(len(mr.Bytes())))
					binary.LittleEndian.PutUint64(rep[40:], uint64(off))
					oob = unix.UnixRights(fd)
					e.key = rkey
					exp = e
					// Registered last: a region revoked meanwhile is revoked now.
					cancel := mr.OnRevoke(func() func(time.Time) { return c.revoke(e) })
					c.exp.mu.Lock()
					if c.exp.dead {
						cancel() // the teardown ran meanwhile
					} else {
						e.cancel = cancel
					}
					c.exp.mu.Unlock()
				} else {
					unix.Close(fd)
					fd = -1
				}
			}
		}
	}
	return rep, oob, fd, exp
}

// newExport takes a free slot and opens it for the peer.
func (c *conn) newExport() *export {
	if !c.enter() {
		return nil
	}
	defer c.leave()
	c.exp.mu.Lock()
	defer c.exp.mu.Unlock()
	if c.exp.dead {
		return nil
	}
	for i, e := range c.exp.slots {
		if e == nil {
			p := c.mine.slot(i)
			gen := atomic.LoadUint64(p)>>slotGenShift + 1
			e = &export{i: i, gen: gen, cancel: func() {}}
			atomic.StoreUint64(p, gen<<slotGenShift|slotValid)
			c.exp.slots[i] = e
			return e
		}
	}
	return nil // all slots in use: the peer goes through us
}

// testHookRevokeWaits, when a test sets it, runs while a revocation
// waits, the peer's direct window having been open.
var testHookRevokeWaits atomic.Pointer[func()]

// errPeerHolds is the error of a connection whose peer did not release a
// region within engine.RevokeWait of its revocation.
var errPeerHolds = errors.New("shm: peer did not release a revoked region")

// revoke withdraws an export (an engine.Revoker): no access starts after
// it, and the wait it returns ends when the accesses in progress have ended
// (an access is one memcpy or one atomic instruction of the peer, or the
// rest of a direct window of its, a PostSend's list of small copies, so
// this is short unless the peer stopped or died in the middle: at the
// deadline the connection is failed).
//
// The accesses are those the slot counts (acquire) and those of the
// peer's direct window (oneSidedDirect), if it is open once the slot is
// cleared: the CAS that clears it is a full fence, so the peer's window,
// read after it, is open if a request of the peer's may have found the
// region still exported, or found our version (offVer), bumped between
// the two, unmoved and so not looked at the slot; it is over once the
// count moves on.
func (c *conn) revoke(e *export) (wait func(deadline time.Time)) {
	c.exp.mu.Lock()
	defer c.exp.mu.Unlock()
	if c.exp.dead || c.exp.slots[e.i] != e {
		return nil
	}
	p := c.mine.slot(e.i)
	for {
		s := atomic.LoadUint64(p)
		if s&slotValid == 0 || s>>slotGenShift != e.gen || atomic.CompareAndSwapUint64(p, s, s&^slotValid) {
			break
		}
	}
	// The version moves after the slot and before the window is read:
	// a peer's window that skips its checks because it found the
	// version unmoved (sender.live) is one this read sees open.
	c.mine.moved()
	win := c.peer.U64(offDirect)
	w0 := atomic.LoadUint64(win)
	return func(deadline time.Time) {
		for uint32(atomic.LoadUint64(p)) != 0 || w0&1 != 0 && atomic.LoadUint64(win) == w0 {
			if h := testHookRevokeWaits.Load(); h != nil && w0&1 != 0 {
				(*h)()
			}
			if c.isDying() {
				break
			}
			if time.Now().After(deadline) {
				go c.fail(errPeerHolds)
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
		ring.RaceAcquire()
		c.exp.mu.Lock()
		defer c.exp.mu.Unlock()
		if c.exp.dead || c.exp.slots[e.i] != e {
			return
		}
		c.exp.slots[e.i] = nil
		if c.exp.offers[e.key] == e {
			delete(c.exp.offers, e.key) // a new registration under the key may be offered again
		}
	}
}
