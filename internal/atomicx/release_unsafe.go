package atomicx

import (
	"sync/atomic"
	"unsafe"
)

// ReleaseU64 is Release64 on a sync/atomic.Uint64, whose value is its only
// non-empty field.
func ReleaseU64(p *atomic.Uint64, v uint64) { Release64((*uint64)(unsafe.Pointer(p)), v) }
