package engine

import (
	"encoding/binary"

	"github.com/goverbs/goverbs/verbs"
)

// Payload appends to dst the memory holding w's outgoing data (its inline
// copy, or its SGEs resolved through the region table) and returns it. A
// wrong key, a region of another PD or an SGE outside its region gives
// WCLocProtErr.
func (q *QP) Payload(w *WQE, dst [][]byte) ([][]byte, verbs.WCStatus) {
	if w.WR.Inline != nil {
		if len(w.WR.Inline) > 0 {
			dst = append(dst, w.WR.Inline)
		}
		return dst, verbs.WCSuccess
	}
	return q.segments(nil, w.WR.SGList, dst, 0)
}

// Sink appends to dst the local memory an RDMA read or an atomic writes
// into; it needs local write access (WCLocProtErr otherwise).
func (q *QP) Sink(w *WQE, dst [][]byte) ([][]byte, verbs.WCStatus) {
	return q.segments(nil, w.WR.SGList, dst, verbs.AccessLocalWrite)
}

// RecvSegments appends to dst the memory of the receive buffers in rc; it
// needs local write access (WCLocProtErr otherwise).
func (q *QP) RecvSegments(rc *RecvCtx, dst [][]byte) ([][]byte, verbs.WCStatus) {
	return q.segments(nil, rc.SGE, dst, verbs.AccessLocalWrite)
}

// segments resolves sgl into dst, through cache when the caller owns one
// (Device.resolveCached).
func (q *QP) segments(cache **MR, sgl []verbs.SGE, dst [][]byte, need verbs.AccessFlags) ([][]byte, verbs.WCStatus) {
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

// ResolveRemote checks an incoming access of n bytes at addr through rkey on
// this QP, the responder: the region must exist, belong to the QP's PD and
// grant need (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic), the
// QP itself must allow that access (its QPAccessFlags), and the range must
// lie inside the region. A zero-length access is always allowed, as in
// verbs: it names no memory.
func (q *QP) ResolveRemote(rkey uint32, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, Fault) {
	if n == 0 {
		return nil, FaultNone
	}
	if qacc := verbs.AccessFlags(q.aaccess.Load()); qacc&need != need {
		return nil, FaultAccess
	}
	b, _, f := q.dev.resolve(rkey, q.pd, addr, n, need)
	return b, f
}

// LookupRemote returns the valid region that rkey names, if it belongs to
// the QP's PD, for a provider that gives the peer direct access to it; the
// access, bounds and QP checks are then the provider's to make.
func (q *QP) LookupRemote(rkey uint32) (*MR, Fault) {
	mr := q.dev.mrs.lookup(rkey)
	if mr == nil {
		return nil, FaultKey
	}
	if mr.pd != q.pd {
		return nil, FaultPD
	}
	return mr, FaultNone
}

// Access returns the QP's access flags (IBV_QP_ACCESS_FLAGS).
func (q *QP) Access() verbs.AccessFlags { return verbs.AccessFlags(q.aaccess.Load()) }

// Atomic executes an incoming atomic operation on this QP, the responder,
// and returns the value the target held before. The target needs remote
// atomic access and 8-byte alignment (FaultAlign). The 64-bit value is in the
// target host's byte order; the operation is atomic with respect to other
// atomics of any QP and to the CPU (sync/atomic).
func (q *QP) Atomic(rkey uint32, addr uint64, op verbs.WROpcode, compareAdd, swap uint64) (uint64, Fault) {
	if addr%8 != 0 {
		return 0, FaultAlign
	}
	b, f := q.ResolveRemote(rkey, addr, 8, verbs.AccessRemoteAtomic)
	if f != FaultNone {
		return 0, f
	}
	old, ok := AtomicAt(b, op, compareAdd, swap)
	if !ok {
		return 0, FaultAlign
	}
	return old, FaultNone
}

// Flush executes an incoming FLUSH of n bytes at addr on this QP, the
// responder. The region must grant AccessFlushGlobal for FlushGlobal or
// AccessFlushPersistent for FlushPersistent, and hold the range. Data placed
// by earlier requests of the connection is already in the region's memory
// (the wire places requests in order), so it is visible to this host's CPU
// when Flush returns; for FlushPersistent the range is also written back to
// the file that backs the memory, if any (msync with MS_SYNC), before Flush
// returns. FaultPersist reports a failed write-back. A zero-length flush
// names no memory and succeeds. Only the region's rights are checked, not
// the QP's access flags (connection managers set remote read, write and
// atomic on their QPs, and flush rights exist only on regions).
func (q *QP) Flush(rkey uint32, addr uint64, n uint32, typ verbs.FlushType) Fault {
	need := verbs.AccessFlushGlobal
	if typ == verbs.FlushPersistent {
		need = verbs.AccessFlushPersistent
	} else if typ != verbs.FlushGlobal {
		return FaultAccess
	}
	if n == 0 {
		return FaultNone
	}
	b, _, f := q.dev.resolve(rkey, q.pd, addr, n, need)
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

// AtomicWrite executes an incoming ATOMIC_WRITE on this QP, the responder:
// the 8 bytes of v are stored at addr with one atomic store. The target
// needs remote write access (as RDMA Write) and 8-byte alignment (FaultAlign).
func (q *QP) AtomicWrite(rkey uint32, addr uint64, v [8]byte) Fault {
	if addr%8 != 0 {
		return FaultAlign
	}
	b, f := q.ResolveRemote(rkey, addr, 8, verbs.AccessRemoteWrite)
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

// Invalidate carries out a Send with Invalidate's request on this QP, the
// responder: the region named by rkey, of the QP's PD, stops working.
func (q *QP) Invalidate(rkey uint32) Fault {
	mr := q.dev.mrs.lookup(rkey)
	if mr == nil {
		return FaultKey
	}
	if mr.pd != q.pd {
		return FaultPD
	}
	mr.invalidate()
	return FaultNone
}

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

// TotalLen returns the number of bytes in a segment list.
func TotalLen(segs [][]byte) int {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n
}
