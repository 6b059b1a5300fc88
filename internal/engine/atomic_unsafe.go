package engine

import (
	"sync/atomic"
	"unsafe"
)

// word64 returns the 8-byte word b[0:8] as a *uint64 for sync/atomic, if it
// is naturally aligned in memory.
func word64(b []byte) (*uint64, bool) {
	if len(b) < 8 {
		return nil, false
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%8 != 0 {
		return nil, false
	}
	return (*uint64)(p), true
}

func fetchAdd(p *uint64, v uint64) uint64 { return atomic.AddUint64(p, v) - v }

func compareSwap(p *uint64, cmp, swap uint64) uint64 {
	for {
		old := atomic.LoadUint64(p)
		if old != cmp {
			return old
		}
		if atomic.CompareAndSwapUint64(p, old, swap) {
			return old
		}
	}
}

// storeBytes stores the 8 bytes of v at p with one atomic store, so that the
// memory holds exactly those bytes whatever the host's byte order.
func storeBytes(p *uint64, v [8]byte) {
	atomic.StoreUint64(p, *(*uint64)(unsafe.Pointer(&v)))
}
