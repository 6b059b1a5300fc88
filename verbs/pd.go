package verbs

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/defaults"
)

// PD is a protection domain (struct ibv_pd): memory regions, queue pairs and
// address handles of one PD work only with each other.
type PD struct {
	ctx *Context
	d   pdDriver
	// A parent domain's (AllocParentDomain): the PD it stands for, its
	// thread domain, and its live QPs (or that it was freed).
	base *PD
	td   *TD
	qps  users
}

// Context returns the context the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Dealloc frees the PD (ibv_dealloc_pd). It returns ErrBusy while regions,
// queue pairs, SRQs or address handles still use it. A parent domain
// (AllocParentDomain) returns ErrBusy while QPs created through it
// remain; the PD it stands for stays. A second Dealloc returns nil.
func (pd *PD) Dealloc() error {
	if pd.base != nil {
		return again(pd.deallocParent())
	}
	return again(pd.d.Dealloc())
}

// RegMR registers buf with the given access rights (ibv_reg_mr) and returns
// the region with its keys. The region keeps buf alive; buf must not be
// resized or reused for other purposes until Dereg. Remote write or remote
// atomic access requires AccessLocalWrite too, as in libibverbs (ErrInvalid).
// Memory from AllocBuffer is also accepted and is what providers that share
// memory between processes need.
func (pd *PD) RegMR(buf []byte, access AccessFlags) (*MR, error) {
	if err := checkAccess(buf, access); err != nil {
		return nil, err
	}
	// The buffer the region lies in is known (and held: Free fails) before
	// the provider registers it, so that a provider may share it at once.
	mr := &MR{pd: pd, buf: buf, addr: addrOf(buf), access: access, ab: bufferOf(buf)}
	if mr.ab != nil {
		mr.ab.regs.Add(1)
	}
	d, err := pd.d.RegMR(mr, buf, mr.addr, access)
	if err != nil {
		if mr.ab != nil {
			mr.ab.regs.Add(-1)
		}
		return nil, err
	}
	mr.d = d
	mr.lkey, mr.rkey = d.LKey(), d.RKey()
	return mr, nil
}

// checkAccess is RegMR's (and Rereg's) check of a region's memory and
// access flags.
func checkAccess(buf []byte, access AccessFlags) error {
	if len(buf) == 0 {
		return fmt.Errorf("%w: empty buffer", ErrInvalid)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return fmt.Errorf("%w: remote write or atomic access requires local write (%v)", ErrInvalid, access)
	}
	const known = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic |
		AccessMWBind | AccessZeroBased | AccessOnDemand | AccessHugetlb | AccessRelaxedOrdering |
		AccessFlushGlobal | AccessFlushPersistent
	if access&^known != 0 {
		return fmt.Errorf("%w: unknown access bits %#x", ErrInvalid, uint32(access&^known))
	}
	if access&(AccessZeroBased|AccessOnDemand) != 0 {
		return fmt.Errorf("%w: access %v", ErrNotSupported, access&(AccessZeroBased|AccessOnDemand))
	}
	return nil
}

// CreateQP creates a queue pair (ibv_create_qp). The QP starts in RESET.
// Zero fields of attr (its QPType, each capability) mean the defaults
// QPInitAttr and QPCap describe. It returns ErrInvalid for a missing CQ, a CQ or SRQ of another context,
// an SRQ on a QP type that cannot use one, or capabilities beyond the
// device's limits, and ErrNotSupported for QP types the provider lacks.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, fmt.Errorf("%w: send and receive CQs are required", ErrInvalid)
	}
	if attr.SendCQ.ctx != pd.ctx || attr.RecvCQ.ctx != pd.ctx {
		return nil, fmt.Errorf("%w: CQ of another context", ErrInvalid)
	}
	if attr.SRQ != nil && attr.SRQ.pd.ctx != pd.ctx {
		return nil, fmt.Errorf("%w: SRQ of another context", ErrInvalid)
	}
	attr.Cap = attr.Cap.withDefaults(attr.SRQ != nil)
	if attr.QPType == 0 {
		attr.QPType = QPTRC
	}
	if pd.base != nil && !pd.qps.take() {
		return nil, ErrClosed // a freed parent domain
	}
	qp := &QP{pd: pd, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ, typ: attr.QPType, user: attr.UserData}
	d, err := pd.d.CreateQP(qp, &attr)
	if err != nil {
		if pd.base != nil {
			pd.qps.drop()
		}
		return nil, err
	}
	qp.d = d
	qp.num = d.Num()
	return qp, nil
}

// CreateSRQ creates a shared receive queue (ibv_create_srq). A zero
// MaxWR means 16 receives and a zero MaxSGE 1 (as QPCap's defaults), so
// that a zero SRQInitAttr is a useful SRQ; negative values are refused.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	if attr.Attr.MaxWR == 0 {
		attr.Attr.MaxWR = defaults.QPWR
	}
	if attr.Attr.MaxSGE == 0 {
		attr.Attr.MaxSGE = defaults.QPSGE
	}
	if attr.Attr.MaxWR < 1 || attr.Attr.MaxSGE < 1 || attr.Attr.SRQLimit < 0 {
		return nil, fmt.Errorf("%w: SRQ attributes %+v", ErrInvalid, attr.Attr)
	}
	srq := &SRQ{pd: pd, user: attr.UserData}
	d, err := pd.d.CreateSRQ(srq, &attr)
	if err != nil {
		return nil, err
	}
	srq.d = d
	return srq, nil
}

// CreateAH creates an address handle for UD sends (ibv_create_ah).
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	ah := &AH{pd: pd, attr: attr}
	d, err := pd.d.CreateAH(ah, &attr)
	if err != nil {
		return nil, err
	}
	ah.d = d
	return ah, nil
}

// InitAHFromWC returns the address vector back to the sender of a UD
// receive (ibv_init_ah_from_wc): grh is the 40 bytes the receive placed
// before the message. Over RoCEv2 with IPv4 they hold the IP header in
// their last 20 bytes (as Linux rxe places it), and the sender's GID is
// its address as ::ffff:a.b.c.d; otherwise they are a GRH, with the
// sender's GID at bytes 8 to 24. Without a GRH (wc.Flags lacks
// WCFlagGRH) the vector is the sender's LID alone. Its arguments are in
// the order of CreateAHFromWC's (C's two functions differ).
func InitAHFromWC(wc *WC, grh []byte, port uint8) (AHAttr, error) {
	a := AHAttr{PortNum: port, DLID: wc.SLID, SL: wc.SL}
	if wc.Flags&WCFlagGRH == 0 {
		return a, nil
	}
	if len(grh) < 40 {
		return AHAttr{}, fmt.Errorf("%w: a GRH is 40 bytes, got %d", ErrInvalid, len(grh))
	}
	a.IsGlobal = true
	if grh[20]>>4 == 4 { // an IPv4 header: RoCEv2 over IPv4
		a.GRH.DGID = GID{10: 0xFF, 11: 0xFF}
		copy(a.GRH.DGID[12:], grh[20+12:20+16])
		a.GRH.TrafficClass = grh[20+1]
		a.GRH.HopLimit = 64 // the sender's TTL is spent on the way: start afresh
		return a, nil
	}
	copy(a.GRH.DGID[:], grh[8:24])
	a.GRH.TrafficClass = grh[0]<<4 | grh[1]>>4
	a.GRH.FlowLabel = uint32(grh[1]&0x0F)<<16 | uint32(grh[2])<<8 | uint32(grh[3])
	a.GRH.HopLimit = 64
	return a, nil
}

// CreateAHFromWC creates an address handle back to the sender of a UD
// receive (ibv_create_ah_from_wc); see InitAHFromWC.
func (pd *PD) CreateAHFromWC(wc *WC, grh []byte, port uint8) (*AH, error) {
	a, err := InitAHFromWC(wc, grh, port)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(a)
}

// AH is an address handle (struct ibv_ah): where a UD send goes.
type AH struct {
	pd   *PD
	attr AHAttr
	d    ahDriver
}

// PD returns the protection domain of the address handle.
func (ah *AH) PD() *PD { return ah.pd }

// Attr returns the address vector the handle was created with.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Destroy destroys the address handle (ibv_destroy_ah).
func (ah *AH) Destroy() error { return again(ah.d.Destroy()) }
