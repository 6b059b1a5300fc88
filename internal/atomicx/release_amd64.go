//go:build amd64 && !race

package atomicx

// Release64 stores v into *p with release order (see the package comment).
//
//go:noescape
func Release64(p *uint64, v uint64)
