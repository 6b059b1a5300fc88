package shm

import (
	"encoding/binary"
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
// sources of its SENDs (the consumer's). Replaced ones stay mapped until
// the teardown, since a goroutine may still hold them.
type remotes struct {
	mu      sync.Mutex
	rdma    map[uint32]*remote
	srcs    map[uint32]*remote
	asking  map[uint32]bool
	retired []*remote
}

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

// askMap asks the peer for direct access to rkey and stalls the send queue
// until the answer (installMap kicks it).
func (c *conn) askMap(rkey uint32) engine.Result {
	c.remotes.mu.Lock()
	asked := c.remotes.asking[rkey]
	c.remotes.asking[rkey] = true
	c.remotes.mu.Unlock()
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
	c.remotes.mu.Lock()
	delete(c.remotes.rdma, r.rkey)
	c.remotes.mu.Unlock()
	c.out.last = nil
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
	c.remotes.mu.Lock()
	if offer {
		// A SEND source: the consumer reads it; Send never sees it.
		if old := c.remotes.srcs[r.rkey]; old != nil {
			c.remotes.retired = append(c.remotes.retired, old)
		}
		c.remotes.srcs[r.rkey] = r
	} else {
		if old := c.remotes.rdma[r.rkey]; old != nil {
			c.remotes.retired = append(c.remotes.retired, old) // Send may hold it in c.out.last
		}
		c.remotes.rdma[r.rkey] = r
		delete(c.remotes.asking, r.rkey)
	}
	c.remotes.mu.Unlock()
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

// refMin is the smallest SEND that the receiver copies straight from the
// sender's region (when it lies in an AllocBuffer). Below it the ring is
// cheaper; above it, data written into the ring by one core and read out by
// another costs a cache-line transfer per 64 bytes twice over (measured:
// 16 KiB through the ring 10.8 µs one-way, by reference 1.6 µs).
const refMin = 2 << 10
