// Package hook holds the process-wide functions that tests and debugging
// tools plug into goverbs (fault injection, packet capture): set and
// cleared at any time while other goroutines call them, and one atomic
// load to find that none is set.
package hook

import "sync/atomic"

// Hook is a function of type F that may be set. The zero value has none.
type Hook[F any] struct{ p atomic.Pointer[F] }

// Set makes f the hook, or removes it when none is true (a nil function
// cannot be told from a set one generically), and returns the function it
// replaces (the zero F when there was none).
func (h *Hook[F]) Set(f F, none bool) (old F) {
	var p *F
	if !none {
		p = &f
	}
	if o := h.p.Swap(p); o != nil {
		old = *o
	}
	return old
}

// Get returns the hook, or nil when none is set.
func (h *Hook[F]) Get() *F { return h.p.Load() }
