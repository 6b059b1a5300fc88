package shm

import (
	"encoding/binary"
	"errors"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
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

// remote is a region of the peer, as we see it.
type remote struct {
	rkey     uint32
	fallback bool // not mappable: go through the peer
	mapping  []byte
	mem      []byte // the region in mapping
	base     uint64 // the region's first remote address
	access   verbs.AccessFlags
	slot     *uint64 // in the peer's segment
	gen      uint64
}

// at returns the n bytes at remote address addr (checked by the caller).
func (r *remote) at(addr uint64, n uint32) []byte {
	off := addr - r.base
	return r.mem[off : off+uint64(n) : off+uint64(n)]
}

// acquire counts an access in the slot, if the region is still exported.
func (r *remote) acquire() bool {
	for {
		s := atomic.LoadUint64(r.slot)
		if s&slotValid == 0 || s>>slotGenShift != r.gen || uint32(s) == ^uint32(0) {
			return false
		}
		if atomic.CompareAndSwapUint64(r.slot, s, s+1) {
			ring.RaceAcquire()
			return true
		}
	}
}

func (r *remote) release() {
	ring.RaceRelease()
	atomic.AddUint64(r.slot, ^uint64(0))
}

func (r *remote) unmap() {
	if r.mapping != nil {
		unix.Munmap(r.mapping)
		r.mapping, r.mem = nil, nil
	}
}

// lookup returns what we know of the peer's region rkey, or nil.
func (c *conn) lookup(rkey uint32) *remote {
	if r := c.last; r != nil && r.rkey == rkey {
		return r
	}
	c.mapMu.Lock()
	r := c.maps[rkey]
	c.mapMu.Unlock()
	if r != nil {
		c.last = r
	}
	return r
}

// askMap asks the peer for direct access to rkey and stalls the send queue
// until the answer (installMap kicks it).
func (c *conn) askMap(rkey uint32) engine.Result {
	c.mapMu.Lock()
	asked := c.asking[rkey]
	c.asking[rkey] = true
	c.mapMu.Unlock()
	if !asked {
		var b [8]byte
		b[0] = msgMapReq
		binary.LittleEndian.PutUint32(b[4:], rkey)
		if _, err := c.uc.Write(b[:]); err != nil {
			c.fail(err)
			return engine.Fail(verbs.WCWRFlushErr)
		}
	}
	return engine.ResultStall
}

// remap forgets a region the peer withdrew and asks again: it may have
// been deregistered (the peer then refuses the access) or re-registered
// under the same key.
func (c *conn) remap(r *remote) engine.Result {
	c.mapMu.Lock()
	delete(c.maps, r.rkey)
	c.mapMu.Unlock()
	c.last = nil
	r.unmap() // only Send, this goroutine, touches mappings
	return c.askMap(r.rkey)
}

// installMap takes the peer's answer to askMap.
func (c *conn) installMap(msg []byte, fds []int) {
	if len(msg) != mapRepLen || len(fds) > 1 {
		closeFds(fds)
		c.fail(errProto)
		return
	}
	r := &remote{rkey: binary.LittleEndian.Uint32(msg[4:]), fallback: true}
	if msg[1] == 0 && len(fds) == 1 {
		slot := int(binary.LittleEndian.Uint32(msg[8:]))
		r.access = verbs.AccessFlags(binary.LittleEndian.Uint32(msg[12:]))
		r.gen = binary.LittleEndian.Uint64(msg[16:])
		r.base = binary.LittleEndian.Uint64(msg[24:])
		n := binary.LittleEndian.Uint64(msg[32:])
		foff := binary.LittleEndian.Uint64(msg[40:])
		if slot < c.peer.l.slots && c.enter() {
			r.slot = c.peer.slot(slot)
			if m, mem, err := mapRegion(fds[0], foff, n); err == nil {
				r.mapping, r.mem, r.fallback = m, mem, false
			}
			c.leave()
		}
	}
	closeFds(fds)
	offer := msg[2] == 1
	c.mapMu.Lock()
	if offer {
		// A SEND source: the consumer reads it; Send never sees it.
		if old := c.srcs[r.rkey]; old != nil {
			c.retired = append(c.retired, old)
		}
		c.srcs[r.rkey] = r
	} else {
		if old := c.maps[r.rkey]; old != nil {
			c.retired = append(c.retired, old) // Send may hold it in c.last
		}
		c.maps[r.rkey] = r
		delete(c.asking, r.rkey)
	}
	c.mapMu.Unlock()
	if offer {
		c.progress(nil) // a reference may be waiting for it
	} else {
		c.req.Resume()
	}
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

// export is one of our regions the peer maps.
type export struct {
	i      int
	gen    uint64
	key    uint32
	cancel func()
}

// refMin is the smallest SEND that the receiver copies straight from the
// sender's region (when it lies in an AllocBuffer). Below it the ring is
// cheaper; above it, data written into the ring by one core and read out by
// another costs a cache-line transfer per 64 bytes twice over (measured:
// 16 KiB through the ring 10.8 µs one-way, by reference 1.6 µs).
const refMin = 2 << 10

// offered reports whether the peer has (or is being sent) a mapping of our
// region lkey, so that a SEND from it can go by reference. The first time
// a key is seen the mapping is offered, and the SEND goes through the ring:
// the offer travels on the socket, and a receiver that meets a reference
// before the offer waits for it.
func (c *conn) offered(lkey uint32) bool {
	c.expMu.Lock()
	e, seen := c.offers[lkey]
	c.expMu.Unlock()
	if seen {
		return e != nil
	}
	rep, oob, fd, e := c.exportMap(lkey, true)
	c.expMu.Lock()
	c.offers[lkey] = e // nil: not mappable, never offered again
	c.expMu.Unlock()
	if e == nil {
		return false
	}
	_, _, err := c.uc.WriteMsgUnix(rep[:], oob, nil)
	unix.Close(fd)
	if err != nil {
		c.fail(err)
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
	rep, oob, fd, _ := c.exportMap(binary.LittleEndian.Uint32(msg[4:]), false)
	_, _, err := c.uc.WriteMsgUnix(rep[:], oob, nil)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		c.fail(err)
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
	if !DirectAccess {
		return rep, nil, fd, nil
	}
	if mr, f := c.resp.Region(rkey); f == engine.FaultNone {
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
					cancel := mr.OnRevoke(func() { c.revoke(e) })
					c.expMu.Lock()
					if c.expDead {
						cancel() // the teardown ran meanwhile
					} else {
						e.cancel = cancel
					}
					c.expMu.Unlock()
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
	c.expMu.Lock()
	defer c.expMu.Unlock()
	if c.expDead {
		return nil
	}
	for i, e := range c.exps {
		if e == nil {
			p := c.mine.slot(i)
			gen := atomic.LoadUint64(p)>>slotGenShift + 1
			e = &export{i: i, gen: gen, cancel: func() {}}
			atomic.StoreUint64(p, gen<<slotGenShift|slotValid)
			c.exps[i] = e
			return e
		}
	}
	return nil // all slots in use: the peer goes through us
}

// errPeerHolds is the error of a connection whose peer did not release a
// region within revokeTimeout of its revocation.
var errPeerHolds = errors.New("shm: peer did not release a revoked region")

const revokeTimeout = time.Second

// revoke withdraws an export: no access starts after it, and it returns
// when the accesses in progress have ended (an access is one memcpy or one
// atomic instruction of the peer, so this is short unless the peer died
// in the middle, which the socket reports).
func (c *conn) revoke(e *export) {
	c.expMu.Lock()
	defer c.expMu.Unlock()
	if c.expDead || c.exps[e.i] != e {
		return
	}
	p := c.mine.slot(e.i)
	for {
		s := atomic.LoadUint64(p)
		if s&slotValid == 0 || s>>slotGenShift != e.gen || atomic.CompareAndSwapUint64(p, s, s&^slotValid) {
			break
		}
	}
	deadline := time.Now().Add(revokeTimeout)
	for uint32(atomic.LoadUint64(p)) != 0 {
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
	c.exps[e.i] = nil
	if c.offers[e.key] == e {
		delete(c.offers, e.key) // a new registration under the key may be offered again
	}
}
