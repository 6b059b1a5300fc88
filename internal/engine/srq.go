package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// SRQ is a shared receive queue. QPs attached to it take receives in
// posting order; each receive is copied out when taken, so receives complete
// in whatever order their QPs finish them.
type SRQ struct {
	v        *verbs.SRQ
	pd       *PD
	mu       sync.Mutex
	rq       recvQueue
	maxSGE   int
	limit    int
	attached atomic.Pointer[[]*QP] // copy-on-write: read without the lock when posting
	dead     bool
}

// CreateSRQ implements driver.PD.
func (pd *PD) CreateSRQ(v *verbs.SRQ, attr *verbs.SRQInitAttr) (driver.SRQ, error) {
	if pd.dead.Load() {
		return nil, errPDGone
	}
	a := pd.ctx.dev.cfg.Attr
	if attr.Attr.MaxWR > a.MaxSRQWR || attr.Attr.MaxSGE > a.MaxSRQSGE {
		return nil, fmt.Errorf("%w: SRQ of %d WRs, %d SGEs exceeds the device's %d, %d",
			verbs.ErrInvalid, attr.Attr.MaxWR, attr.Attr.MaxSGE, a.MaxSRQWR, a.MaxSRQSGE)
	}
	if attr.Attr.SRQLimit > attr.Attr.MaxWR {
		return nil, fmt.Errorf("%w: SRQ limit %d above its size %d", verbs.ErrInvalid, attr.Attr.SRQLimit, attr.Attr.MaxWR)
	}
	s := &SRQ{v: v, pd: pd, rq: newRecvQueue(attr.Attr.MaxWR, attr.Attr.MaxSGE), maxSGE: attr.Attr.MaxSGE, limit: attr.Attr.SRQLimit}
	s.attached.Store(&[]*QP{})
	pd.refs.Add(1)
	return s, nil
}

func (s *SRQ) attach(q *QP) {
	s.mu.Lock()
	old := *s.attached.Load()
	n := append(append(make([]*QP, 0, len(old)+1), old...), q)
	s.attached.Store(&n)
	s.mu.Unlock()
}

func (s *SRQ) detach(q *QP) {
	s.mu.Lock()
	old := *s.attached.Load()
	n := make([]*QP, 0, len(old))
	for _, x := range old {
		if x != q {
			n = append(n, x)
		}
	}
	s.attached.Store(&n)
	s.mu.Unlock()
}

// PostRecv implements driver.SRQ.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) error {
	var perr error
	posted := false
	s.mu.Lock()
	for i := range wrs {
		wr := &wrs[i]
		var err error
		if s.dead {
			err = verbs.ErrClosed
		} else {
			err = s.rq.post(wr, s.maxSGE, "SRQ (max_wr, max_sge)")
		}
		if err != nil {
			perr = &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
			break
		}
		posted = true
	}
	s.mu.Unlock()
	if posted {
		for _, q := range *s.attached.Load() {
			q.t.RecvPosted()
		}
	}
	return perr
}

// take copies the oldest receive into dst; it raises the limit event when
// the number of posted receives falls below the armed limit.
func (s *SRQ) take(dst *RecvCtx) bool {
	s.mu.Lock()
	if s.rq.head == s.rq.tail {
		s.mu.Unlock()
		return false
	}
	r := &s.rq.ring[s.rq.head&s.rq.mask]
	dst.WRID = r.wrid
	dst.SGE = append(dst.SGE[:0], r.sge...)
	s.rq.head++
	fire := s.limit > 0 && int(s.rq.tail-s.rq.head) < s.limit
	if fire {
		s.limit = 0 // the limit event fires once per arming
	}
	s.mu.Unlock()
	if fire {
		s.pd.ctx.raise(verbs.AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: s.v})
	}
	return true
}

// Modify implements driver.SRQ.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	if mask&^(verbs.SRQAttrMaxWR|verbs.SRQAttrLimit) != 0 {
		return fmt.Errorf("%w: SRQ attribute mask %#x", verbs.ErrInvalid, uint32(mask))
	}
	if mask&verbs.SRQAttrMaxWR != 0 {
		return fmt.Errorf("%w: resizing an SRQ", verbs.ErrNotSupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mask&verbs.SRQAttrLimit != 0 {
		if attr.SRQLimit < 0 || attr.SRQLimit > s.rq.max {
			return fmt.Errorf("%w: SRQ limit %d (size %d)", verbs.ErrInvalid, attr.SRQLimit, s.rq.max)
		}
		s.limit = attr.SRQLimit
	}
	return nil
}

// Query implements driver.SRQ.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: s.rq.max, MaxSGE: s.maxSGE, SRQLimit: s.limit}, nil
}

// Destroy implements driver.SRQ.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrClosed
	}
	if n := len(*s.attached.Load()); n > 0 {
		return fmt.Errorf("%w: SRQ used by %d QPs", verbs.ErrBusy, n)
	}
	s.dead = true
	s.pd.refs.Add(-1)
	return nil
}
