package verbs

import "fmt"

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType uint32

const (
	// MWType1 is IBV_MW_TYPE_1: bound with QP.BindMW, on any QP of the
	// window's PD; a bind of length 0 unbinds it. Send with Invalidate and
	// LOCAL_INV cannot invalidate it.
	MWType1 MWType = 1
	// MWType2 is IBV_MW_TYPE_2: bound by a BIND_MW work request
	// (SendWR.BindMW), to the QP that posted it, which alone can then reach
	// it; it is invalidated by LOCAL_INV or by a peer's Send with
	// Invalidate, and only then can it be bound again.
	MWType2 MWType = 2
)

// String returns "TYPE_1", "TYPE_2" or "MWType(n)".
func (t MWType) String() string {
	switch t {
	case MWType1:
		return "TYPE_1"
	case MWType2:
		return "TYPE_2"
	}
	return fmt.Sprintf("MWType(%d)", uint32(t))
}

// MW is a memory window (struct ibv_mw): a remote key for a range of a
// memory region, granted and withdrawn with work requests on a QP instead
// of registrations. The region must have been registered with
// AccessMWBind. A window that is not bound (a new one, or one invalidated)
// grants nothing: its key fails at the peer as an unknown one does.
type MW struct {
	pd  *PD
	typ MWType
	d   mwDriver
}

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// RKey returns the window's remote key: the key of the last bind posted
// for it (as libibverbs updates mw->rkey when ibv_bind_mw posts), or,
// before any, the key it was allocated with. A bind that then fails
// leaves the window unbound.
func (mw *MW) RKey() uint32 { return mw.d.RKey() }

// Dealloc frees the window (ibv_dealloc_mw); a bound window's key stops
// working at once. A second Dealloc returns nil (see Errors in the
// package doc).
func (mw *MW) Dealloc() error { return again(mw.d.Dealloc()) }

// AllocMW allocates a memory window of type typ (ibv_alloc_mw). It returns
// ErrInvalid for another type and ErrNotSupported when the provider has no
// memory windows (provider rdmacore: see its package doc).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("%w: memory window type %v", ErrInvalid, typ)
	}
	a, ok := pd.d.(mwAllocator)
	if !ok {
		return nil, fmt.Errorf("%w: memory windows", ErrNotSupported)
	}
	mw := &MW{pd: pd, typ: typ}
	d, err := a.AllocMW(mw, typ)
	if err != nil {
		return nil, err
	}
	mw.d = d
	return mw, nil
}

// MWBindInfo says what a bind grants (struct ibv_mw_bind_info): Length
// bytes of MR from Addr (an address inside the region, as in an SGE), with
// Access (AccessRemoteRead, AccessRemoteWrite, AccessRemoteAtomic; remote
// write and atomic need a region with AccessLocalWrite). A type 1 window
// bound with Length 0 (and no MR) is unbound.
type MWBindInfo struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access AccessFlags
}

// BindMW is the bind_mw member of struct ibv_send_wr: a BIND_MW work
// request binds MW to Info with the remote key RKey, whose upper 24 bits
// must be MW's (IncRKey(mw.RKey()) gives the next key); the bind fails
// with WCMWBindErr otherwise, or when Info breaks a rule of the bind.
type BindMW struct {
	MW   *MW
	RKey uint32
	Info MWBindInfo
}

// MWBind is ibv_bind_mw's request (struct ibv_mw_bind): the work request's
// WRID and Flags (SendSignaled, SendFence) and what to bind.
type MWBind struct {
	WRID  uint64
	Flags SendFlags
	Info  MWBindInfo
}

// IncRKey returns the next remote key for a bind of the window whose key
// is rkey (ibv_inc_rkey): the upper 24 bits stay, the low 8 count up.
func IncRKey(rkey uint32) uint32 {
	return rkey&^0xFF | (rkey+1)&0xFF
}

// BindMW posts a request to bind the type 1 window mw (ibv_bind_mw) and
// returns the window's new remote key, which MW.RKey reports from now on.
// The bind completes as a work request does (WCBindMW, WCMWBindErr when a
// rule of the bind is broken: the QP then goes to ERR). The key may be sent
// to the peer by a later request of the same QP (QP ordering puts it after
// the bind), by other means only once the bind's completion is polled.
// It returns ErrInvalid for a type 2 window (post a SendWR with WRBindMW)
// and the errors of PostSend.
func (qp *QP) BindMW(mw *MW, bind MWBind) (uint32, error) {
	if mw == nil || mw.typ != MWType1 {
		return 0, fmt.Errorf("%w: ibv_bind_mw binds a type 1 memory window", ErrInvalid)
	}
	rkey := IncRKey(mw.RKey())
	err := qp.PostSend([]SendWR{{WRID: bind.WRID, Opcode: WRBindMW, Flags: bind.Flags,
		BindMW: &BindMW{MW: mw, RKey: rkey, Info: bind.Info}}})
	if err != nil {
		return 0, err
	}
	return rkey, nil
}

// Rereg changes the region (ibv_rereg_mr): what flags says, of its
// protection domain (pd), its memory (buf, as RegMR takes it) and its
// access flags (access); the rest stays. Conceptually a deregistration
// followed by a registration: the region gets new keys (read LKey and
// RKey again), and the old keys stop working at once, locally and at
// peers. It returns ErrInvalid for arguments RegMR would refuse or no
// flag, ErrBusy while memory windows are bound to the region, and
// ErrNotSupported from a provider without it. On an error the region is
// unchanged. Rereg must not run concurrently with other uses of the MR.
func (mr *MR) Rereg(flags ReregFlags, pd *PD, buf []byte, access AccessFlags) error {
	if flags == 0 || flags&^(ReregTranslation|ReregPD|ReregAccess) != 0 {
		return fmt.Errorf("%w: rereg flags %#x", ErrInvalid, uint32(flags))
	}
	if mr.dereged.Load() {
		return fmt.Errorf("%w: memory region deregistered", ErrClosed)
	}
	r, ok := mr.d.(mrRereger)
	if !ok {
		return fmt.Errorf("%w: ibv_rereg_mr", ErrNotSupported)
	}
	npd, nbuf, nacc := mr.pd, mr.buf, mr.access
	if flags&ReregPD != 0 {
		if pd == nil || pd.ctx != mr.pd.ctx {
			return fmt.Errorf("%w: rereg to a nil PD or one of another context", ErrInvalid)
		}
		npd = pd
	}
	if flags&ReregTranslation != 0 {
		nbuf = buf
	}
	if flags&ReregAccess != 0 {
		nacc = access
	}
	if err := checkAccess(nbuf, nacc); err != nil {
		return err
	}
	nab := bufferOf(nbuf)
	if nab != nil {
		nab.regs.Add(1)
	}
	d, err := r.Rereg(npd.d, nbuf, addrOf(nbuf), nacc)
	if err != nil {
		if nab != nil {
			nab.regs.Add(-1)
		}
		return err
	}
	if mr.ab != nil {
		mr.ab.regs.Add(-1)
	}
	mr.d = d
	mr.pd, mr.buf, mr.addr, mr.access, mr.ab = npd, nbuf, addrOf(nbuf), nacc, nab
	mr.lkey, mr.rkey = mr.d.LKey(), mr.d.RKey()
	return nil
}

// ReregFlags says what MR.Rereg changes (enum ibv_rereg_mr_flags).
type ReregFlags uint32

const (
	// ReregTranslation is IBV_REREG_MR_CHANGE_TRANSLATION: the memory.
	ReregTranslation ReregFlags = 1 << 0
	// ReregPD is IBV_REREG_MR_CHANGE_PD: the protection domain.
	ReregPD ReregFlags = 1 << 1
	// ReregAccess is IBV_REREG_MR_CHANGE_ACCESS: the access flags.
	ReregAccess ReregFlags = 1 << 2
)

// Resize changes the number of completions the CQ can hold to at least cqe
// (ibv_resize_cq); CQE reports the new size, which may be larger. The
// completions the CQ holds stay, in order. It returns ErrInvalid for cqe
// below 1, above the device's MaxCQE or below the number of completions
// the CQ holds now, and ErrNotSupported from a provider without it.
func (cq *CQ) Resize(cqe int) error {
	if cqe < 1 {
		return fmt.Errorf("%w: cqe %d", ErrInvalid, cqe)
	}
	r, ok := cq.d.(cqResizer)
	if !ok {
		return fmt.Errorf("%w: ibv_resize_cq", ErrNotSupported)
	}
	return r.Resize(cqe)
}

// The optional provider interfaces behind memory windows, Rereg and
// Resize (verbs/driver publishes the same literals).
type (
	mwAllocator = interface {
		AllocMW(mw *MW, typ MWType) (mwDriver, error)
	}
	mwDriver = interface {
		RKey() uint32
		Dealloc() error
	}
	mrRereger = interface {
		Rereg(pd pdDriver, buf []byte, addr uint64, access AccessFlags) (mrDriver, error)
	}
	cqResizer = interface {
		Resize(cqe int) error
	}
)
