// Package ring is the shared memory of goverbs' shm provider: segments
// mapped from sealed memfds, and the single-producer single-consumer rings
// of records that the two processes of a connection exchange in them. All
// of the provider's unsafe code is here (in *_unsafe.go files): typed
// words in shared memory, and the replacement of a mapping that a peer
// could still be writing.
//
// Nothing the peer writes is trusted: a consumer checks every record
// header against the ring's bounds (Consumer.Peek), and a producer checks
// the consumer's head against its own tail (Producer.RefreshHead); a peer
// that breaks them gets ErrCorrupt.
package ring

import (
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/atomicx"
)

// ErrCorrupt reports a ring the peer wrote into in a way no correct peer
// would.
var ErrCorrupt = errors.New("shm: peer corrupted the shared ring")

// The control words of a ring, each on a cache line of its own, at Ctl's
// offsets from its base.
const (
	CtlTail  = 0   // producer's position (bytes ever written)
	CtlHead  = 64  // consumer's position (bytes ever consumed)
	CtlSleep = 128 // consumer: 1 = poke me when you publish
	CtlWait  = 192 // producer: 1 = poke me when you consume
	CtlSize  = 256
)

// Ctl is the control words of one ring.
type Ctl struct {
	Tail, Head  *uint64
	Sleep, Wait *uint32
}

// Ctl returns the control words of the ring whose control block is at base.
func (s *Segment) Ctl(base int) Ctl {
	return Ctl{Tail: s.U64(base + CtlTail), Head: s.U64(base + CtlHead), Sleep: s.U32(base + CtlSleep), Wait: s.U32(base + CtlWait)}
}

// Claim reports whether the other side asked for a poke in flag (Sleep or
// Wait), clearing the request: one of those that publish sends it.
func Claim(flag *uint32) bool {
	return atomic.LoadUint32(flag) != 0 && atomic.CompareAndSwapUint32(flag, 1, 0)
}

// Records start on cache lines: a 40-byte header, then the payload. The
// header's first word is the record's stamp, written last: the consumer
// finds a record by its stamp, polling the line the record itself starts
// in, instead of a tail word it would read first (a cache miss, then
// another for the record). A small message is one line, which the
// producer takes from the consumer's cache once and the consumer takes
// back once (records packed 8-byte aligned straddled two lines every other
// message; with the hot window of Rewind, the lines in use are as few).
//
//	0   stamp: the record's ring position (| stampPad for a pad), XOR the ring's key
//	8   size (whole record), kind, flags
//	16  payload bytes, immediate data
//	24  remote address
//	32  rkey, message total
const (
	HdrLen = 40
	Align  = 64

	// stampPad marks a pad: the rest of the ring, to its end, is unused.
	stampPad = 1 << 63
)

// Rec is a decoded record header (without its stamp). Kind and Flags are
// the user's.
type Rec struct {
	Size  uint32 // whole record, header included, multiple of Align
	Kind  uint8
	Flags uint8
	N     uint32 // payload bytes
	Imm   uint32
	Addr  uint64
	RKey  uint32
	Total uint32
}

// PutRec writes a header but its stamp (Commit writes that).
func PutRec(b []byte, r Rec) {
	PutHdr(b, r.Size, r.Kind, r.Flags, r.N, r.Imm, r.Addr, r.RKey, r.Total)
}

// PutHdr is PutRec from the fields: a hot path that builds a Rec first
// has the compiler copy it through the stack with wide loads over the
// narrow stores just made, which the CPU cannot forward (a stall).
func PutHdr(b []byte, size uint32, kind, flags uint8, n, imm uint32, addr uint64, rkey, total uint32) {
	_ = b[39]
	binary.LittleEndian.PutUint32(b[8:], size)
	b[12], b[13], b[14], b[15] = kind, flags, 0, 0
	binary.LittleEndian.PutUint32(b[16:], n)
	binary.LittleEndian.PutUint32(b[20:], imm)
	binary.LittleEndian.PutUint64(b[24:], addr)
	binary.LittleEndian.PutUint32(b[32:], rkey)
	binary.LittleEndian.PutUint32(b[36:], total)
}

// GetRec decodes the header at b.
func GetRec(b []byte, r *Rec) {
	r.Size = binary.LittleEndian.Uint32(b[8:])
	r.Kind, r.Flags = b[12], b[13]
	r.N = binary.LittleEndian.Uint32(b[16:])
	r.Imm = binary.LittleEndian.Uint32(b[20:])
	r.Addr = binary.LittleEndian.Uint64(b[24:])
	r.RKey = binary.LittleEndian.Uint32(b[32:])
	r.Total = binary.LittleEndian.Uint32(b[36:])
}

// Size returns the size of a record with payload bytes.
func Size(payload int) int { return (HdrLen + payload + Align - 1) &^ (Align - 1) }

// ring is what both ends know of a ring: its control words, its data, and
// the key of its stamps. A stamp is the record's position XOR the key:
// whatever a word held before (an older record's stamp, payload bytes of an
// older lap, the zeros of a fresh segment) is not mistaken for the record
// the consumer waits for, without the producer clearing the word after
// each record (a store to a line the consumer may hold, which the stamp
// behind it would wait for). The key guards against accidents, not a
// hostile peer, which can write anything and is checked as before.
type ring struct {
	C    Ctl
	Data []byte
	mask uint64
	key  uint64
}

func (r *ring) init(s *Segment, ctl, off, size int, key uint64) {
	r.C = s.Ctl(ctl)
	r.Data = s.Mem[off : off+size : off+size]
	r.mask = uint64(size - 1)
	r.key = key
}

// Producer is the producing end of a ring in the peer's segment. Its
// position is private (the peer cannot move it); the peer's head is read
// and checked.
type Producer struct {
	ring
	Tail uint64 // private: published with Publish
	Pub  uint64 // the tail last published
	Head uint64 // the peer's head, last read
}

// Init sets the producer on the ring of s with its control block at ctl
// and its data at off (size bytes, a power of two), stamped with key.
func (r *Producer) Init(s *Segment, ctl, off, size int, key uint64) {
	r.ring.init(s, ctl, off, size, key)
	r.Tail = atomic.LoadUint64(r.C.Tail)
	r.Head, r.Pub = r.Tail, r.Tail
}

// MaxPayload is the largest payload one record of the ring carries.
func (r *Producer) MaxPayload() int { return min(len(r.Data)/4, 64<<10) - HdrLen }

// RefreshHead reads the consumer's head; a head outside [Head, Tail] means
// a corrupt or hostile peer.
func (r *Producer) RefreshHead() error {
	h := atomic.LoadUint64(r.C.Head)
	if h < r.Head || h > r.Tail {
		return ErrCorrupt
	}
	r.Head = h
	RaceAcquire()
	return nil
}

// CheckHead is RefreshHead's check alone: the head is not taken. After a
// Reserve that failed, the stall that follows waits for the head to move
// from the one that Reserve decided on; taking a newer head there would
// hide the move that makes room (the consumer, having published it before
// it was asked to poke, never pokes: a stream of 32 KiB WRITEs through
// the ring hung so).
func (r *Producer) CheckHead() error {
	if h := atomic.LoadUint64(r.C.Head); h < r.Head || h > r.Tail {
		return ErrCorrupt
	}
	return nil
}

// Reserve returns n contiguous bytes (n a multiple of Align) at the tail,
// writing a pad first when they do not fit before the end of the ring, or
// nil when the ring has no room.
func (r *Producer) Reserve(n int) []byte {
	size := uint64(len(r.Data))
	idx := r.Tail & r.mask
	need := uint64(n)
	if idx+uint64(n) > size {
		need += size - idx
	}
	if size-(r.Tail-r.Head) < need {
		if r.RefreshHead() != nil || size-(r.Tail-r.Head) < need {
			return nil
		}
	}
	if idx+uint64(n) > size {
		r.pad(idx)
		idx = 0
	}
	return r.Data[idx : idx+uint64(n) : idx+uint64(n)]
}

// pad ends the lap at offset idx of the tail: the records go on at the
// start of the ring (free: the caller checked).
func (r *Producer) pad(idx uint64) {
	RaceRelease()
	atomicx.Release64(r.stamp(idx), (r.Tail|stampPad)^r.key)
	r.Tail += uint64(len(r.Data)) - idx
}

// HotSize is how far into the ring records go while the consumer keeps
// up: see Rewind.
const HotSize = 8 << 10

// Rewind starts the ring over at its beginning (a pad to its end) when the
// consumer has taken everything (head is a head it published) and the tail
// is past the first HotSize bytes. Messages that the consumer keeps up with
// then stay in a few pages: walking the whole ring touches a new page every
// hundred small records, and on a virtual machine the first write to a page
// after a while can stall for microseconds (measured: a stall of over 2 µs
// every 4096 bytes of ring, in stretches; with a hot window, none).
func (r *Producer) Rewind(head uint64) {
	idx := r.Tail & r.mask
	if head != r.Tail || idx < HotSize {
		return
	}
	r.pad(idx)
	r.Head = head
}

// Commit publishes to the consumer the record written (but its stamp) into
// the space Reserve returned by stamping it (a release store: the consumer
// that sees the stamp sees the record).
func (r *Producer) Commit(n int) {
	RaceRelease()
	atomicx.Release64(r.stamp(r.Tail&r.mask), r.Tail^r.key)
	r.Tail += uint64(n)
}

// Publish stores the tail, which orders the committed records' stamps
// before the check of the consumer's sleep flag (it sets the flag, then
// looks at the stamp: one of the two sees the other), and reports whether
// the consumer asked to be poked.
func (r *Producer) Publish() bool {
	if r.Pub == r.Tail {
		return false
	}
	r.Pub = r.Tail
	RaceRelease()
	atomic.StoreUint64(r.C.Tail, r.Tail)
	return Claim(r.C.Sleep)
}

// Consumer is the consuming end of a ring in our own segment.
type Consumer struct {
	ring
	Head uint64        // private: published with Publish
	Pub  uint64        // the head last published
	next atomic.Uint64 // Head, for Idle (other goroutines)
}

// Init sets the consumer on the ring of s (see Producer.Init).
func (r *Consumer) Init(s *Segment, ctl, off, size int, key uint64) {
	r.ring.init(s, ctl, off, size, key)
}

// Peek returns the next record (skipping pads), with its payload, or ok
// false when the ring is empty. Every field the peer wrote is checked.
func (r *Consumer) Peek(h *Rec) (payload []byte, ok bool, err error) {
	idx := r.Head & r.mask
	st := atomic.LoadUint64(r.stamp(idx)) ^ r.key
	if st == r.Head|stampPad {
		if idx == 0 {
			return nil, false, ErrCorrupt // a whole lap of nothing
		}
		r.Head += uint64(len(r.Data)) - idx
		atomicx.ReleaseU64(&r.next, r.Head)
		idx = 0
		st = atomic.LoadUint64(r.stamp(0)) ^ r.key
	}
	if st != r.Head {
		return nil, false, nil
	}
	RaceAcquire()
	b := r.Data[idx:]
	if len(b) < HdrLen {
		return nil, false, ErrCorrupt
	}
	GetRec(b, h)
	size := uint64(h.Size)
	if size < HdrLen || size&7 != 0 || size > uint64(len(b)) || uint64(h.N) > size-HdrLen {
		return nil, false, ErrCorrupt
	}
	return b[HdrLen : HdrLen+uint64(h.N) : HdrLen+uint64(h.N)], true, nil
}

// Empty reports whether Peek would find nothing: no record (nor pad) is
// stamped at the consumer's position. Small enough to be inlined: a
// consumer looks at a ring that is usually empty (responses) without
// Peek's call.
func (r *Consumer) Empty() bool {
	st := atomic.LoadUint64(r.stamp(r.Head&r.mask)) ^ r.key
	return st != r.Head && st != r.Head|stampPad
}

// Idle reports, from any goroutine, whether the consumer has taken and
// acknowledged every record the producer stamped.
func (r *Consumer) Idle() bool {
	h := r.next.Load()
	if atomic.LoadUint64(r.C.Head) != h {
		return false // taken, not yet acknowledged
	}
	st := atomic.LoadUint64(r.stamp(h&r.mask)) ^ r.key
	return st != h && st != h|stampPad
}

// Advance consumes the record Peek returned.
func (r *Consumer) Advance(h *Rec) {
	r.Head += uint64(h.Size)
	atomicx.ReleaseU64(&r.next, r.Head)
}

// SetHead places a consumer at head (tests).
func (r *Consumer) SetHead(head uint64) {
	r.Head = head
	r.next.Store(head)
}

// Publish makes the consumed space available and reports whether the
// producer asked to be poked.
func (r *Consumer) Publish() bool {
	if r.Pub == r.Head {
		return false
	}
	r.Pub = r.Head
	RaceRelease()
	atomic.StoreUint64(r.C.Head, r.Head)
	return Claim(r.C.Wait)
}
