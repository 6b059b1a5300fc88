package rsocket

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// loadSGE reads a target SGL entry (16 bytes, 8-aligned) that the peer
// writes into our memory with an RDMA WRITE while we may be reading it:
// over shared memory the peer's copy runs in its own process, at any
// moment. Each half is loaded atomically and the entry twice; an entry
// that changed between the two reads is being written and not taken, nor
// is one with only one half written (a zero address or length). It
// reports false for those, and for an empty entry.
func loadSGE(b []byte) (sge, bool) {
	_ = b[15]
	lo := (*uint64)(unsafe.Pointer(&b[0]))
	hi := (*uint64)(unsafe.Pointer(&b[8]))
	h1, l1 := atomic.LoadUint64(hi), atomic.LoadUint64(lo)
	h2, l2 := atomic.LoadUint64(hi), atomic.LoadUint64(lo)
	if h1 != h2 || l1 != l2 {
		return sge{}, false
	}
	var raw [16]byte
	binary.NativeEndian.PutUint64(raw[:], l1)
	binary.NativeEndian.PutUint64(raw[8:], h1)
	e := getSGE(raw[:], binary.LittleEndian)
	return e, e.Length != 0 && e.Addr != 0
}

// clearSGE empties a target SGL entry we took, with atomic stores, so that
// the peer's next write of it is seen whole or not at all by loadSGE.
func clearSGE(b []byte) {
	_ = b[15]
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[8])), 0)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[0])), 0)
}
