package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/atomicx"
)

// A segment is the shared memory one side of a connection creates and
// passes to the other (memfd + SCM_RIGHTS). Its owner consumes it: it holds
// the owner's two inbound rings (requests, and responses to the owner's
// reads and atomics), the owner's state words that the peer reads, and the
// slots through which the owner lets the peer access its regions directly.
//
//	0     request ring control  (tail, head, sleep, wait: one cache line each)
//	256   response ring control
//	512   nak position, nak status, RNR position   (owner writes, peer reads)
//	576   QP state, IRD, access flags, min_rnr_timer (owner writes, peer reads)
//	592   the stamp keys of the request and response rings (owner writes at creation)
//	4096  export slots, 8 bytes each
//	...   request ring data, then response ring data
const (
	ctlReq    = 0
	ctlResp   = 256
	offNakPos = 512
	offNakSt  = 520
	offRNRPos = 528 // position+1 of a SEND that waits for a receive (0: none)
	offState  = 576
	offIRD    = 580
	offAccess = 584
	offMinRNR = 588 // min_rnr_timer
	offKeys   = 592 // the stamp keys of the request and response rings (owner writes at creation)
	offSlots  = 4096

	ctlTail  = 0   // producer's position (bytes ever written)
	ctlHead  = 64  // consumer's position (bytes ever consumed)
	ctlSleep = 128 // consumer: 1 = poke me when you publish
	ctlWait  = 192 // producer: 1 = poke me when you consume

	stateOK  = 0
	stateErr = 1 // the owner's QP is in ERR: it consumes nothing more
)

// layout is the geometry of a segment; both sides use the same one.
type layout struct {
	reqSize, respSize, slots int
}

var defaultLayout = layout{reqSize: 256 << 10, respSize: 64 << 10, slots: 1024}

func (l layout) reqOff() int  { return offSlots + (l.slots*8+4095)&^4095 }
func (l layout) respOff() int { return l.reqOff() + l.reqSize }
func (l layout) size() int    { return l.respOff() + l.respSize }

func (l layout) valid() bool {
	pow2 := func(n int) bool { return n >= 4096 && n <= 64<<20 && n&(n-1) == 0 }
	return pow2(l.reqSize) && pow2(l.respSize) && l.slots > 0 && l.slots <= 1<<16
}

// segment is a mapped segment.
type segment struct {
	mem []byte
	l   layout
}

// newSegment creates a segment in a fresh memfd; the caller closes the fd
// once it has been passed to the peer.
func newSegment(l layout) (*segment, int, error) {
	fd, err := unix.MemfdCreate("goverbs-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(l.size())); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: ftruncate: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sizeSeals|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: seal segment: %w", err)
	}
	s, err := mapSegment(fd, l)
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	// Each ring's stamps are keyed (see ring): a fresh segment's zeros are
	// no record.
	for i := range 2 {
		*s.u64(offKeys + 8*i) = rand.Uint64() | 1
	}
	return s, fd, nil
}

// mapSegment maps a segment the peer sent, after checking its size.
func mapSegment(fd int, l layout) (*segment, error) {
	if !l.valid() {
		return nil, errors.New("shm: invalid segment layout")
	}
	if size, err := sealedSize(fd); err != nil {
		return nil, fmt.Errorf("shm: segment: %w", err)
	} else if size != int64(l.size()) {
		return nil, fmt.Errorf("shm: segment of %d bytes, want %d", size, l.size())
	}
	mem, err := unix.Mmap(fd, 0, l.size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap segment: %w", err)
	}
	return &segment{mem: mem, l: l}, nil
}

const sizeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// sealedSize returns the size of a memfd a peer passed, after checking that
// it cannot shrink: memory mapped from a file that shrinks faults (SIGBUS)
// when touched, and a peer must not be able to crash us that way.
func sealedSize(fd int) (int64, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return 0, fmt.Errorf("not a sealable memfd: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return 0, errors.New("memfd size is not sealed")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

func (s *segment) unmap() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

// retire detaches a segment that goroutines may still be reading or
// writing without having entered (see conn.enter): its pages are replaced,
// at the same addresses, by private anonymous memory, so that the shared
// memory is released (and a late write reaches nobody) while every access
// stays valid. The placeholder is unmapped once the connection is garbage
// (retired).
func (s *segment) retire() {
	if s == nil || s.mem == nil {
		return
	}
	// On failure (out of memory for page tables) the shared mapping stays,
	// and the cleanup unmaps it just the same.
	unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(s.mem)), uintptr(len(s.mem)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
}

// retired unmaps the placeholders of a connection's retired segments; it
// runs as a cleanup once the connection is unreachable, when no goroutine
// can be inside them.
func retired(mems [2][]byte) {
	for _, m := range mems {
		if m != nil {
			unix.Munmap(m)
		}
	}
	nRetired.Add(1)
}

// nRetired counts the connections whose placeholders were unmapped (tests).
var nRetired atomic.Int64

func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) slot(i int) *uint64 { return s.u64(offSlots + 8*i) }

// ctl returns the control words of one of the segment's rings.
func (s *segment) ctl(base int) ringCtl {
	return ringCtl{tail: s.u64(base + ctlTail), head: s.u64(base + ctlHead), sleep: s.u32(base + ctlSleep), wait: s.u32(base + ctlWait)}
}

type ringCtl struct {
	tail, head  *uint64
	sleep, wait *uint32
}

// claim reports whether the other side asked for a poke in flag (sleep or
// wait), clearing the request: one of those that publish sends it.
func claim(flag *uint32) bool {
	return atomic.LoadUint32(flag) != 0 && atomic.CompareAndSwapUint32(flag, 1, 0)
}

// Records start on cache lines: a 40-byte header, then the payload. The
// header's first word is the record's stamp, written last: the consumer
// finds a record by its stamp, polling the line the record itself starts
// in, instead of a tail word it would read first (a cache miss, then
// another for the record). A small message is one line, which the
// producer takes from the consumer's cache once and the consumer takes
// back once (records packed 8-byte aligned straddled two lines every other
// message; with the hot window of rewind, the lines in use are as few).
//
//	0   stamp: the record's ring position (| stampPad for a pad), XOR the ring's key
//	8   size (whole record), kind, flags
//	16  payload bytes, immediate data
//	24  remote address
//	32  rkey, message total
const (
	recHdr   = 40
	recAlign = 64

	// stampPad marks a pad: the rest of the ring, to its end, is unused.
	stampPad = 1 << 63

	recSend       = 2  // a piece of a SEND message
	recWrite      = 3  // a piece of an RDMA WRITE the target places
	recImm        = 4  // the immediate data of a WRITE WITH IMM placed directly
	recReadReq    = 5  // an RDMA READ request the target answers
	recReadResp   = 6  // a piece of a READ response
	recAtomicReq  = 7  // an atomic the target executes (payload: compare/add, swap)
	recAtomicResp = 8  // an atomic's result (payload: the old value)
	recSendRef    = 9  // a SEND whose data the receiver copies from the sender's region (rkey: its key, addr: where)
	recFlush      = 10 // a FLUSH the target carries out (imm: its type, total: its length)
	recAtomicWr   = 11 // an ATOMIC_WRITE the target carries out (payload: the 8 bytes)

	fFirst     = 1 << 0
	fLast      = 1 << 1
	fImm       = 1 << 2 // imm carries immediate data
	fInv       = 1 << 3 // imm carries the rkey to invalidate
	fSolicited = 1 << 4
	fCAS       = 1 << 5 // atomic: compare-and-swap (else fetch-and-add)
	fAck       = 1 << 6 // the requester waits for this record's acknowledgement (see deferAck)
)

// rec is a decoded record header (without its stamp).
type rec struct {
	size  uint32 // whole record, header included, multiple of recAlign
	kind  uint8
	flags uint8
	n     uint32 // payload bytes
	imm   uint32
	addr  uint64
	rkey  uint32
	total uint32
}

// putRec writes a header but its stamp (commit writes that).
func putRec(b []byte, r rec) {
	putHdr(b, r.size, r.kind, r.flags, r.n, r.imm, r.addr, r.rkey, r.total)
}

// putHdr is putRec from the fields: a hot path that builds a rec first
// has the compiler copy it through the stack with wide loads over the
// narrow stores just made, which the CPU cannot forward (a stall).
func putHdr(b []byte, size uint32, kind, flags uint8, n, imm uint32, addr uint64, rkey, total uint32) {
	_ = b[39]
	binary.LittleEndian.PutUint32(b[8:], size)
	b[12], b[13], b[14], b[15] = kind, flags, 0, 0
	binary.LittleEndian.PutUint32(b[16:], n)
	binary.LittleEndian.PutUint32(b[20:], imm)
	binary.LittleEndian.PutUint64(b[24:], addr)
	binary.LittleEndian.PutUint32(b[32:], rkey)
	binary.LittleEndian.PutUint32(b[36:], total)
}

func getRec(b []byte, r *rec) {
	r.size = binary.LittleEndian.Uint32(b[8:])
	r.kind, r.flags = b[12], b[13]
	r.n = binary.LittleEndian.Uint32(b[16:])
	r.imm = binary.LittleEndian.Uint32(b[20:])
	r.addr = binary.LittleEndian.Uint64(b[24:])
	r.rkey = binary.LittleEndian.Uint32(b[32:])
	r.total = binary.LittleEndian.Uint32(b[36:])
}

func recSize(payload int) int { return (recHdr + payload + recAlign - 1) &^ (recAlign - 1) }

// ring is what both ends know of a ring: its control words, its data, and
// the key of its stamps. A stamp is the record's position XOR the key:
// whatever a word held before (an older record's stamp, payload bytes of an
// older lap, the zeros of a fresh segment) is not mistaken for the record
// the consumer waits for, without the producer clearing the word after
// each record (a store to a line the consumer may hold, which the stamp
// behind it would wait for). The key guards against accidents, not a
// hostile peer, which can write anything and is checked as before.
type ring struct {
	c    ringCtl
	data []byte
	mask uint64
	key  uint64
}

func (r *ring) init(s *segment, ctl, off, size int) {
	r.c = s.ctl(ctl)
	r.data = s.mem[off : off+size : off+size]
	r.mask = uint64(size - 1)
	r.key = atomic.LoadUint64(s.u64(offKeys + 8*(ctl/ctlResp)))
}

// stamp is the stamp word at offset idx (a multiple of 8).
func (r *ring) stamp(idx uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.data[idx])) }

// prodRing is the producing end of a ring in the peer's segment. Its
// position is private (the peer cannot move it); the peer's head is read
// and checked.
type prodRing struct {
	ring
	tail uint64 // private: published with publish
	pub  uint64 // the tail last published
	head uint64 // the peer's head, last read
}

func (r *prodRing) init(s *segment, ctl, off, size int) {
	r.ring.init(s, ctl, off, size)
	r.tail = atomic.LoadUint64(r.c.tail)
	r.head, r.pub = r.tail, r.tail
}

// maxPayload is the largest payload one record of the ring carries.
func (r *prodRing) maxPayload() int { return min(len(r.data)/4, 64<<10) - recHdr }

// refreshHead reads the consumer's head; a head outside [head, tail] means a
// corrupt or hostile peer.
func (r *prodRing) refreshHead() error {
	h := atomic.LoadUint64(r.c.head)
	if h < r.head || h > r.tail {
		return errCorrupt
	}
	r.head = h
	raceAcquire()
	return nil
}

// reserve returns n contiguous bytes (n a multiple of recAlign) at the
// tail, writing a pad first when they do not fit before the end of the
// ring, or nil when the ring has no room.
func (r *prodRing) reserve(n int) []byte {
	size := uint64(len(r.data))
	idx := r.tail & r.mask
	need := uint64(n)
	if idx+uint64(n) > size {
		need += size - idx
	}
	if size-(r.tail-r.head) < need {
		if r.refreshHead() != nil || size-(r.tail-r.head) < need {
			return nil
		}
	}
	if idx+uint64(n) > size {
		r.pad(idx)
		idx = 0
	}
	return r.data[idx : idx+uint64(n) : idx+uint64(n)]
}

// pad ends the lap at offset idx of the tail: the records go on at the
// start of the ring (free: the caller checked).
func (r *prodRing) pad(idx uint64) {
	raceRelease()
	atomicx.Release64(r.stamp(idx), (r.tail|stampPad)^r.key)
	r.tail += uint64(len(r.data)) - idx
}

// hotSize is how far into the ring records go while the consumer keeps
// up: see rewind.
const hotSize = 8 << 10

// rewind starts the ring over at its beginning (a pad to its end) when the
// consumer has taken everything (head is a head it published) and the tail
// is past the first hotSize bytes. Messages that the consumer keeps up with
// then stay in a few pages: walking the whole ring touches a new page every
// hundred small records, and on a virtual machine the first write to a page
// after a while can stall for microseconds (measured: a stall of over 2 µs
// every 4096 bytes of ring, in stretches; with a hot window, none).
func (r *prodRing) rewind(head uint64) {
	idx := r.tail & r.mask
	if head != r.tail || idx < hotSize {
		return
	}
	r.pad(idx)
	r.head = head
}

// commit publishes to the consumer the record written (but its stamp) into
// the space reserve returned by stamping it (a release store: the consumer
// that sees the stamp sees the record).
func (r *prodRing) commit(n int) {
	raceRelease()
	atomicx.Release64(r.stamp(r.tail&r.mask), r.tail^r.key)
	r.tail += uint64(n)
}

// publish stores the tail, which orders the committed records' stamps before
// the check of the consumer's sleep flag (it sets the flag, then looks at
// the stamp: one of the two sees the other), and reports whether the
// consumer asked to be poked.
func (r *prodRing) publish() bool {
	if r.pub == r.tail {
		return false
	}
	r.pub = r.tail
	raceRelease()
	atomic.StoreUint64(r.c.tail, r.tail)
	return claim(r.c.sleep)
}

// consRing is the consuming end of a ring in our own segment.
type consRing struct {
	ring
	head uint64        // private: published with publish
	pub  uint64        // the head last published
	next atomic.Uint64 // head, for idle (other goroutines)
}

var errCorrupt = errors.New("shm: peer corrupted the shared ring")

// peek returns the next record (skipping pads), with its payload, or ok
// false when the ring is empty. Every field the peer wrote is checked.
func (r *consRing) peek(h *rec) (payload []byte, ok bool, err error) {
	idx := r.head & r.mask
	st := atomic.LoadUint64(r.stamp(idx)) ^ r.key
	if st == r.head|stampPad {
		if idx == 0 {
			return nil, false, errCorrupt // a whole lap of nothing
		}
		r.head += uint64(len(r.data)) - idx
		atomicx.ReleaseU64(&r.next, r.head)
		idx = 0
		st = atomic.LoadUint64(r.stamp(0)) ^ r.key
	}
	if st != r.head {
		return nil, false, nil
	}
	raceAcquire()
	b := r.data[idx:]
	if len(b) < recHdr {
		return nil, false, errCorrupt
	}
	getRec(b, h)
	size := uint64(h.size)
	if size < recHdr || size&7 != 0 || size > uint64(len(b)) || uint64(h.n) > size-recHdr {
		return nil, false, errCorrupt
	}
	return b[recHdr : recHdr+uint64(h.n) : recHdr+uint64(h.n)], true, nil
}

// idle reports, from any goroutine, whether the consumer has taken and
// acknowledged every record the producer stamped.
func (r *consRing) idle() bool {
	h := r.next.Load()
	if atomic.LoadUint64(r.c.head) != h {
		return false // taken, not yet acknowledged
	}
	st := atomic.LoadUint64(r.stamp(h&r.mask)) ^ r.key
	return st != h && st != h|stampPad
}

// advance consumes the record peek returned.
func (r *consRing) advance(h *rec) {
	r.head += uint64(h.size)
	atomicx.ReleaseU64(&r.next, r.head)
}

// publish makes the consumed space available and reports whether the
// producer asked to be poked.
func (r *consRing) publish() bool {
	if r.pub == r.head {
		return false
	}
	r.pub = r.head
	raceRelease()
	atomic.StoreUint64(r.c.head, r.head)
	return claim(r.c.wait)
}
