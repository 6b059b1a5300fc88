//go:build !amd64 || race

package atomicx

import "sync/atomic"

// Release64 stores v into *p with (at least) release order.
func Release64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
