package rpma

import (
	"github.com/goverbs/goverbs/verbs"
)

// SRQ is a shared receive queue with, unless its configuration says
// otherwise, its own receive CQ (struct rpma_srq): connections configured
// with it (ConnCfg.SetSRQ) take their receive buffers from it, and their
// receives complete on its receive CQ.
type SRQ struct {
	peer *Peer
	srq  *verbs.SRQ
	rcq  *CQ
}

// NewSRQ creates a shared receive queue (rpma_srq_new); cfg nil means the
// defaults. It returns ErrInval for a nil peer and ErrProvider when the
// verbs objects cannot be created.
func (p *Peer) NewSRQ(cfg *SRQCfg) (*SRQ, error) {
	if p == nil {
		return nil, wrap(ErrInval, "nil peer")
	}
	if cfg == nil {
		cfg = NewSRQCfg()
	}
	srq, err := p.pd.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: max(cfg.RQSize(), 1), MaxSGE: 1}})
	if err != nil {
		return nil, provider("ibv_create_srq", err)
	}
	s := &SRQ{peer: p, srq: srq}
	if cfg.RCQSize() > 0 {
		if s.rcq, err = newCQ(p.ctx, cfg.RCQSize(), nil); err != nil {
			srq.Destroy()
			return nil, err
		}
	}
	return s, nil
}

// RCQ returns the SRQ's receive CQ, or nil (rpma_srq_get_rcq).
func (s *SRQ) RCQ() *CQ { return s.rcq }

// Recv posts a receive of up to n bytes into dst at off, completed with
// opCtx (rpma_srq_recv). It returns ErrInval for bad arguments and
// ErrProvider when posting fails.
func (s *SRQ) Recv(dst *MR, off, n int, opCtx uint64) error {
	if s == nil || dst == nil {
		return wrap(ErrInval, "nil SRQ or region")
	}
	if err := checkRange("srq recv", off, n, uint64(dst.Size())); err != nil {
		return err
	}
	wr := [1]verbs.RecvWR{{WRID: opCtx, SGList: []verbs.SGE{dst.mr.SGE(off, n)}}}
	if err := s.srq.PostRecv(wr[:]); err != nil {
		return provider("ibv_post_srq_recv", err)
	}
	return nil
}

// Delete destroys the SRQ and its receive CQ (rpma_srq_delete); delete the
// connections that use it first.
func (s *SRQ) Delete() error {
	if s == nil {
		return wrap(ErrInval, "nil SRQ")
	}
	if err := s.srq.Destroy(); err != nil {
		return provider("ibv_destroy_srq", err)
	}
	if s.rcq != nil {
		return s.rcq.destroy()
	}
	return nil
}
