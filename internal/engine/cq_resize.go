package engine

import (
	"fmt"
	"runtime"

	"github.com/goverbs/goverbs/verbs"
)

// cqRing is a CQ's ring of slots. Resize replaces it; push and poll load
// it once per completion, and again after their CAS on the position when
// it changed meanwhile (see Resize).
type cqRing struct {
	slots []cqSlot
	mask  uint64
}

// cqClosed, set in the tail (head) position, keeps producers (pollers)
// out of the ring while Resize moves it: their CAS on the position fails,
// producers wait, pollers find the CQ empty.
const cqClosed = 1 << 63

// Resize implements driver.CQResizer (ibv_resize_cq). The ring is
// replaced by one of at least cqe slots holding the same completions at
// the same positions, with neither side of the ring taking a lock:
//
//  1. the tail, then the head, are closed (cqClosed): no new reservation
//     of a slot, by a producer or a poller, succeeds;
//  2. Resize waits for those made before: every slot a producer reserved
//     is published, every slot a poller took is released (a few
//     instructions each: none blocks in between);
//  3. the completions between head and tail are copied into the new ring,
//     which is published, and the positions are opened again, unchanged.
//
// A producer or poller that loaded the old ring before step 1 and whose
// CAS on the position succeeds after step 3 (the position is the same
// value again) loads the ring again after its CAS and uses the new one:
// its slot there is in the state it found in the old (free for a producer,
// the same completion for a poller), since the new ring is at least as
// large as the completions it holds and keeps their positions.
func (cq *CQ) Resize(cqe int) error {
	if cqe > cq.ctx.dev.cfg.Attr.MaxCQE {
		return fmt.Errorf("%w: cqe %d exceeds the device's %d", verbs.ErrInvalid, cqe, cq.ctx.dev.cfg.Attr.MaxCQE)
	}
	cq.rmu.Lock()
	defer cq.rmu.Unlock()
	if cq.destroyed.Load() {
		return fmt.Errorf("%w: CQ destroyed", verbs.ErrClosed)
	}
	t, h := closePos(&cq.tail), closePos(&cq.head)
	old := cq.r.Load()
	for p := h; p < t; p++ { // reserved by producers: wait until published
		for old.slots[p&old.mask].seq.Load() != p+1 {
			runtime.Gosched()
		}
	}
	size := uint64(len(old.slots))
	for p := h - min(h, size); p < h; p++ { // taken by pollers: wait until released
		for old.slots[p&old.mask].seq.Load() == p+1 {
			runtime.Gosched()
		}
	}
	if held := t - h; held > uint64(cqe) {
		cq.head.Store(h)
		cq.tail.Store(t)
		return fmt.Errorf("%w: cqe %d is below the %d completions the CQ holds", verbs.ErrInvalid, cqe, held)
	}
	n := uint64(2)
	for n < uint64(cqe) {
		n <<= 1
	}
	if n != size {
		r := &cqRing{slots: make([]cqSlot, n), mask: n - 1}
		for i := range n {
			p := h + (i-h)&r.mask // the first position from h that slot i holds
			if p < t {
				copyWC(&r.slots[i].wc, &old.slots[p&old.mask].wc)
				r.slots[i].seq.Store(p + 1)
			} else {
				r.slots[i].seq.Store(p)
			}
		}
		cq.r.Store(r)
	}
	cq.head.Store(h)
	cq.tail.Store(t)
	return nil
}

// closePos sets cqClosed in a position and returns the position.
func closePos(pos interface {
	Load() uint64
	CompareAndSwap(old, new uint64) bool
}) uint64 {
	for {
		p := pos.Load()
		if pos.CompareAndSwap(p, p|cqClosed) {
			return p
		}
	}
}
