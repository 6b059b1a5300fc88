package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// U64 returns the 64-bit word at offset off (a multiple of 8) of the
// segment, for sync/atomic.
func (s *Segment) U64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.Mem[off])) }

// U32 returns the 32-bit word at offset off (a multiple of 4).
func (s *Segment) U32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.Mem[off])) }

// stamp is the stamp word at offset idx (a multiple of 8) of the ring.
func (r *ring) stamp(idx uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.Data[idx])) }

// replaceAnon maps private anonymous memory over mem, in place.
func replaceAnon(mem []byte) {
	unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
}
