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
