package perf

import (
	"sync/atomic"
	"unsafe"
)

// load64 reads the 8-byte counter at b[0:8] with an atomic load, since
// the transport writes it from another goroutine. b must be 8-byte aligned.
func load64(b []byte) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(b))))
}

// load32 reads the 4-byte word at b[0:4] with an atomic load (native byte
// order). b must be 4-byte aligned.
func load32(b []byte) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(b))))
}

// load8 reads b[0] with an atomic load of the aligned word that holds it,
// since the transport writes it from another goroutine. That word must lie
// inside b's allocation (true of an 8-byte aligned buffer); the shift
// assumes a little-endian machine (amd64, arm64).
func load8(b []byte) byte {
	p := unsafe.Pointer(unsafe.SliceData(b))
	off := uintptr(p) & 3
	w := atomic.LoadUint32((*uint32)(unsafe.Add(p, -int(off))))
	return byte(w >> (8 * off))
}
