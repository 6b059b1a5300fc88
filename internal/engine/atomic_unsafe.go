package engine

import (
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
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

// AtomicAt executes a verbs atomic (fetch-and-add or compare-and-swap) on
// the 8-byte word at b[0:8], which may be memory shared with another
// process, and returns the previous value; ok is false when the word is not
// naturally aligned.
func AtomicAt(b []byte, op verbs.WROpcode, compareAdd, swap uint64) (old uint64, ok bool) {
	p, ok := word64(b)
	if !ok {
		return 0, false
	}
	if op == verbs.WRAtomicFetchAndAdd {
		return fetchAdd(p, compareAdd), true
	}
	return compareSwap(p, compareAdd, swap), true
}

// storeBytes stores the 8 bytes of v at p with one atomic store, so that the
// memory holds exactly those bytes whatever the host's byte order.
func storeBytes(p *uint64, v [8]byte) {
	atomic.StoreUint64(p, *(*uint64)(unsafe.Pointer(&v)))
}

// AtomicStoreAt stores the 8 bytes of v at b[0:8], which may be memory
// shared with another process, with one atomic store; it reports false
// when the word is not naturally aligned.
func AtomicStoreAt(b []byte, v [8]byte) bool {
	p, ok := word64(b)
	if ok {
		storeBytes(p, v)
	}
	return ok
}

// addrOf returns the address of b's first byte (the start of its array
// when b is empty).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
