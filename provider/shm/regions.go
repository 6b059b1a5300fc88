package shm

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
)

// Export slots: the low 32 bits count the peer's accesses in progress, bit
// 32 says the region may be accessed, the bits above are the generation of
// the slot's current use.
const (
	slotValid    = 1 << 32
	slotGenShift = 33
)

const mapRepLen = 48

// remotes is the peer's regions that we map: for RDMA (Send's), and the
// sources of its SENDs (the consumer's). A replaced or forgotten mapping is
// unmapped as soon as no goroutine of ours holds it (remote.discard).
//
// What a peer may make us map is bounded (a peer that sent mapping
// offers without end once exhausted the process's mappings and killed
// it): at most maxRemotes regions known per connection, maxRemoteBytes
// mapped, no answer that was not asked for, no offer of a region whose
// earlier offer is still exported, and at most maxReoffers offers of one
// key. A peer that goes beyond ends its connection (errMapAbuse).
type remotes struct {
	mu       sync.Mutex
	rdma     map[uint32]*remote
	srcs     map[uint32]*remote
	asking   map[uint32]bool
	reoffers map[uint32]int // offers of a key beyond the first
	bytes    uint64         // mapped, over rdma and srcs
}

// Bounds of what a peer may have us map (see remotes).
const (
	maxRemotes     = 4096
	maxRemoteBytes = 1 << 40
	maxReoffers    = 16
)

// errMapAbuse ends a connection whose peer sent mappings beyond the bounds.
var errMapAbuse = errors.New("shm: peer sent region mappings beyond the bounds (unasked, repeated or too many)")

// remote is a region of the peer, as we see it. Its fields do not change
// once it is known; the mapping is unmapped (by free) only when the remote
// is discarded and nobody holds it.
type remote struct {
	rkey     uint32
	fallback bool // not mappable: go through the peer
	mapping  []byte
	mem      []byte // the region in mapping
	base     uint64 // the region's first remote address
	access   verbs.AccessFlags
	slot     *uint64 // in the peer's segment
	gen      uint64
	// refs counts our goroutines inside the mapping (low 32 bits);
	// remDead: discarded, no new holds; remGone: unmapped.
	refs atomic.Uint64
}

const (
	remDead = 1 << 32
	remGone = 1 << 33
)

// hold counts a use of the mapping, unless it was discarded.
func (r *remote) hold() bool {
	for {
		s := r.refs.Load()
		if s&remDead != 0 {
			return false
		}
		if r.refs.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// drop ends a use; the last one of a discarded remote unmaps it.
func (r *remote) drop() {
	if r.refs.Add(^uint64(0)) == remDead {
		r.free()
	}
}

// discard forbids new uses and unmaps the mapping now, or when the last use
// ends.
func (r *remote) discard() {
	for {
		s := r.refs.Load()
		if s&remDead != 0 {
			return
		}
		if r.refs.CompareAndSwap(s, s|remDead) {
			if s == 0 {
				r.free()
			}
			return
		}
	}
}

// free unmaps a discarded remote that nobody holds, once.
func (r *remote) free() {
	if r.refs.CompareAndSwap(remDead, remDead|remGone) && r.mapping != nil {
		unix.Munmap(r.mapping)
	}
}

// exported reports whether the peer still exports the region in its slot
// (what it says: it is checked only to catch a peer repeating an offer).
func (r *remote) exported() bool {
	s := atomic.LoadUint64(r.slot)
	return s&slotValid != 0 && s>>slotGenShift == r.gen
}

// contains reports whether the n bytes at remote address addr lie in r
// (written so that no sum can overflow).
func (r *remote) contains(addr uint64, n uint32) bool {
	return addr >= r.base && addr-r.base <= uint64(len(r.mem)) && uint64(n) <= uint64(len(r.mem))-(addr-r.base)
}

// at returns the n bytes at remote address addr (checked by the caller).
func (r *remote) at(addr uint64, n uint32) []byte {
	off := addr - r.base
	return r.mem[off : off+uint64(n) : off+uint64(n)]
}

// acquire starts an access: it holds the mapping and counts the access in
// the peer's slot, if the region is still exported there.
func (r *remote) acquire() bool {
	if !r.hold() {
		return false
	}
	for {
		s := atomic.LoadUint64(r.slot)
		if s&slotValid == 0 || s>>slotGenShift != r.gen || uint32(s) == ^uint32(0) {
			r.drop()
			return false
		}
		if atomic.CompareAndSwapUint64(r.slot, s, s+1) {
			ring.RaceAcquire()
			return true
		}
	}
}

// release ends an access acquire started.
func (r *remote) release() {
	ring.RaceRelease()
	atomic.AddUint64(r.slot, ^uint64(0))
	r.drop()
}

// forget removes r from m if it is still there, and discards it; remotes.mu
// is held.
func (rs *remotes) forget(m map[uint32]*remote, r *remote) {
	if m[r.rkey] == r {
		delete(m, r.rkey)
	}
	if !r.fallback && r.refs.Load()&remDead == 0 {
		rs.bytes -= uint64(len(r.mem))
	}
	r.discard()
}

// lookup returns what we know of the peer's region rkey, or nil.
func (c *conn) lookup(rkey uint32) *remote {
	if r := c.out.last; r != nil && r.rkey == rkey {
		return r
	}
	c.remotes.mu.Lock()
	r := c.remotes.rdma[rkey]
	c.remotes.mu.Unlock()
	if r != nil {
		c.out.last = r
	}
	return r
}

// askMap asks the peer for direct access to rkey, once until the answer
// (installMap records it and kicks the send queue). It reports false when
// the socket failed (the connection then fails).
func (c *conn) askMap(rkey uint32) bool {
	c.remotes.mu.Lock()
	asked := c.remotes.asking[rkey]
	c.remotes.asking[rkey] = true
	c.remotes.mu.Unlock()
	if !asked {
		var b [8]byte
		b[0] = msgMapReq
		binary.LittleEndian.PutUint32(b[4:], rkey)
		if err := c.sendSock(b[:], nil); err != nil {
			c.fail(err)
			return false
		}
		c.sentSockMsg()
	}
	return true
}

// remap forgets a region the peer withdrew and asks again: it may have
// been deregistered (the peer then refuses the access) or re-registered
// under the same key. The send queue stalls until the answer.
func (c *conn) remap(r *remote) engine.Result {
	c.remotes.mu.Lock()
	c.remotes.forget(c.remotes.rdma, r)
	c.remotes.mu.Unlock()
	c.out.last = nil
	if !c.askMap(r.rkey) {
		return engine.Fail(verbs.WCWRFlushErr)
	}
	return engine.ResultStall
}

// installMap takes the peer's answer to askMap, or its offer of a SEND
// source.
func (c *conn) installMap(msg []byte, fds []int) {
	defer closeFds(fds)
	if len(msg) != mapRepLen || len(fds) > 1 {
		c.fail(errProto)
		return
	}
	offer := msg[2] == 1
	if err := c.install(msg, fds); err != nil {
		c.fail(err)
		return
	}
	if offer {
		c.progress(nil) // a reference may be waiting for it
	} else {
		c.req.Resume()
	}
}

// install records the mapping msg describes (fds holds its memfd), within
// the bounds of remotes.
func (c *conn) install(msg []byte, fds []int) error {
	rkey, offer := binary.LittleEndian.Uint32(msg[4:]), msg[2] == 1
	c.remotes.mu.Lock()
	defer c.remotes.mu.Unlock()
	m := c.remotes.rdma
	if offer {
		m = c.remotes.srcs
	}
	old := m[rkey]
	switch {
	case !offer && !c.remotes.asking[rkey]:
		return errMapAbuse // an answer nobody asked for
	case offer && old != nil && !old.fallback && old.exported():
		return errMapAbuse // offered again while its offer stands
	case offer && old != nil && c.remotes.reoffers[rkey] >= maxReoffers:
		return errMapAbuse
	case old == nil && len(c.remotes.rdma)+len(c.remotes.srcs) >= maxRemotes:
		return errMapAbuse
	}
	r := &remote{rkey: rkey, fallback: true}
	if msg[1] == 0 && len(fds) == 1 {
		slot := int(binary.LittleEndian.Uint32(msg[8:]))
		r.access = verbs.AccessFlags(binary.LittleEndian.Uint32(msg[12:]))
		r.gen = binary.LittleEndian.Uint64(msg[16:])
		r.base = binary.LittleEndian.Uint64(msg[24:])
		n := binary.LittleEndian.Uint64(msg[32:])
		foff := binary.LittleEndian.Uint64(msg[40:])
		if n > maxRemoteBytes-c.remotes.bytes {
			return errMapAbuse
		}
		if slot < c.peer.l.slots && c.enter() {
			r.slot = c.peer.slot(slot)
			if mp, mem, err := mapRegion(fds[0], foff, n); err == nil {
				r.mapping, r.mem, r.fallback = mp, mem, false
				c.remotes.bytes += uint64(len(mem))
			}
			c.leave()
		}
	}
	if old != nil {
		// Send may still hold the old one (c.out.last), the consumer a
		// source it is copying from: it is unmapped when they let go.
		c.remotes.forget(m, old)
		if offer {
			c.remotes.reoffers[rkey]++
		}
	}
	m[rkey] = r
	if !offer {
		delete(c.remotes.asking, rkey)
	}
	return nil
}

// mapRegion maps n bytes at offset off of a memfd the peer passed.
func mapRegion(fd int, off, n uint64) (mapping, mem []byte, err error) {
	size, err := ring.SealedSize(fd)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 || off > uint64(size) || n > uint64(size)-off || n > 1<<40 {
		return nil, nil, errProto
	}
	page := uint64(os.Getpagesize())
	start := off &^ (page - 1)
	length := (off + n - start + page - 1) &^ (page - 1)
	m, err := unix.Mmap(fd, int64(start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	d := off - start
	return m, m[d : d+n : d+n], nil
}

// refMin is the smallest SEND that the receiver copies straight from the
// sender's region (when it lies in an AllocBuffer). Below it the ring is
// cheaper; above it, data written into the ring by one core and read out by
// another costs a cache-line transfer per 64 bytes twice over (measured:
// 16 KiB through the ring 10.8 µs one-way, by reference 1.6 µs).
const refMin = 2 << 10
