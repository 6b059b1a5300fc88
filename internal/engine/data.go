package engine

import (
	"encoding/binary"

	"github.com/goverbs/goverbs/verbs"
)

// payload is Requester.Payload.
func (q *QP) payload(w *WQE, dst [][]byte) ([][]byte, verbs.WCStatus) {
	if w.WR.Inline != nil {
		if len(w.WR.Inline) > 0 {
			dst = append(dst, w.WR.Inline)
		}
		return dst, verbs.WCSuccess
	}
	return q.segments(nil, w.WR.SGList, dst, 0)
}

// segments resolves sgl into dst, through cache when the caller owns one
// (Device.resolveCached).
//
// A single SGE in the cached region (the posting path's common case) is
// resolved here without the calls: it was a fifth of an 8-byte RDMA
// WRITE's CPU.
func (q *QP) segments(cache **MR, sgl []verbs.SGE, dst [][]byte, need verbs.AccessFlags) ([][]byte, verbs.WCStatus) {
	if len(sgl) == 1 && cache != nil {
		s := &sgl[0]
		if mr := *cache; mr != nil && mr.key == s.LKey && s.Length > 0 && mr.valid.Load() && mr.pd == q.pd && mr.access&need == need &&
			s.Addr >= mr.addr && s.Addr-mr.addr <= uint64(len(mr.buf)) && uint64(s.Length) <= uint64(len(mr.buf))-(s.Addr-mr.addr) {
			off := s.Addr - mr.addr
			return append(dst, mr.buf[off:off+uint64(s.Length):off+uint64(s.Length)]), verbs.WCSuccess
		}
	}
	return q.segmentsList(cache, sgl, dst, need)
}

// segmentsList is segments for any list.
func (q *QP) segmentsList(cache **MR, sgl []verbs.SGE, dst [][]byte, need verbs.AccessFlags) ([][]byte, verbs.WCStatus) {
	for _, s := range sgl {
		if s.Length == 0 {
			continue
		}
		b, _, f := q.dev.resolveCached(cache, s.LKey, q.pd, s.Addr, s.Length, need)
		if f != FaultNone {
			return dst, verbs.WCLocProtErr
		}
		dst = append(dst, b)
	}
	return dst, verbs.WCSuccess
}

// resolveRemote is Responder.Resolve.
func (q *QP) resolveRemote(rkey uint32, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, Fault) {
	if n == 0 {
		return nil, FaultNone
	}
	if qacc := verbs.AccessFlags(q.aaccess.Load()); qacc&need != need {
		return nil, FaultAccess
	}
	b, _, f := q.dev.resolve(rkey, q, addr, n, need)
	return b, f
}

// atomic is Responder.Atomic.
func (q *QP) atomic(rkey uint32, addr uint64, op verbs.WROpcode, compareAdd, swap uint64) (uint64, Fault) {
	if addr%8 != 0 {
		return 0, FaultAlign
	}
	b, f := q.resolveRemote(rkey, addr, 8, verbs.AccessRemoteAtomic)
	if f != FaultNone {
		return 0, f
	}
	old, ok := AtomicAt(b, op, compareAdd, swap)
	if !ok {
		return 0, FaultAlign
	}
	return old, FaultNone
}

// flush is Responder.Flush.
func (q *QP) flush(rkey uint32, addr uint64, n uint32, typ verbs.FlushType) Fault {
	need := verbs.AccessFlushGlobal
	if typ == verbs.FlushPersistent {
		need = verbs.AccessFlushPersistent
	} else if typ != verbs.FlushGlobal {
		return FaultAccess
	}
	if n == 0 {
		return FaultNone
	}
	b, _, f := q.dev.resolve(rkey, q, addr, n, need)
	if f != FaultNone {
		return f
	}
	persistFence()
	if typ == verbs.FlushPersistent {
		if err := persist(b); err != nil {
			return FaultPersist
		}
	}
	return FaultNone
}

// atomicWrite is Responder.AtomicWrite.
func (q *QP) atomicWrite(rkey uint32, addr uint64, v [8]byte) Fault {
	if addr%8 != 0 {
		return FaultAlign
	}
	b, f := q.resolveRemote(rkey, addr, 8, verbs.AccessRemoteWrite)
	if f != FaultNone {
		return f
	}
	p, ok := word64(b)
	if !ok {
		return FaultAlign
	}
	storeBytes(p, v)
	return FaultNone
}

// invalidate is Responder.Invalidate (see invalidateKey).
func (q *QP) invalidate(rkey uint32) Fault { return q.invalidateKey(rkey) }

// CopyInto copies src into the segment list dst starting at byte offset off
// of the list, and returns the number of bytes copied (less than len(src)
// when the list is too short).
func CopyInto(dst [][]byte, off int, src []byte) int {
	n := 0
	for _, d := range dst {
		if off >= len(d) {
			off -= len(d)
			continue
		}
		c := copyBytes(d[off:], src[n:])
		n += c
		off = 0
		if n == len(src) {
			break
		}
	}
	return n
}

// CopyFrom copies into dst the bytes at byte offset off of the segment list
// src, and returns the number copied (less than len(dst) when the list is
// too short): the gather of a payload's piece.
func CopyFrom(dst []byte, src [][]byte, off int) int {
	n := 0
	for _, s := range src {
		if n == len(dst) {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n += copyBytes(dst[n:], s[off:])
		off = 0
	}
	return n
}

// Copy is copy for a transport's fast path: what CopyFrom does for one
// segment, inlined (copyBytes).
func Copy(d, s []byte) int { return copyBytes(d, s) }

// copyBytes is copy, with messages of 8 to 16 bytes moved by two 8-byte
// loads and stores instead of a call to memmove (small messages are the
// latency path).
func copyBytes(d, s []byte) int {
	n := min(len(d), len(s))
	if n >= 8 && n <= 16 {
		a, b := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[n-8:n])
		binary.LittleEndian.PutUint64(d, a)
		binary.LittleEndian.PutUint64(d[n-8:n], b)
		return n
	}
	return copy(d, s)
}

// AppendRange appends to dst the pieces of the segment list segs that hold
// its n bytes from byte offset off (fewer when segs end first).
func AppendRange(dst, segs [][]byte, off, n int) [][]byte {
	for _, s := range segs {
		if n <= 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		k := min(len(s)-off, n)
		dst = append(dst, s[off:off+k])
		n -= k
		off = 0
	}
	return dst
}

// TotalLen returns the number of bytes in a segment list.
func TotalLen(segs [][]byte) int {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n
}
