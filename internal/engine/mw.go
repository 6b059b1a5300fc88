package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Memory windows. A window owns one slot of the device's region table from
// AllocMW to Dealloc; what the slot holds is an MR value describing the
// window's current binding (win set: its range of the bound region, the
// window's access, the key of the bind, and for type 2 the QP it is bound
// to). A bind or an invalidation never changes a published entry: it puts
// a new one in the slot and revokes the old, so that the data path reads
// entries without a lock, as it reads regions, and a direct mapping a
// transport gave out (shm) is withdrawn as a deregistration withdraws it.
// An unbound window's entry is not valid: its key fails as an unknown one.

// MW is a memory window.
type MW struct {
	v    *verbs.MW
	pd   *PD
	typ  verbs.MWType
	dev  *Device
	rkey atomic.Uint32 // the key of the last bind posted (driver.MW.RKey)

	mu   sync.Mutex // binds, invalidations and Dealloc
	cur  *MR        // the table entry
	gone bool
}

// AllocMW implements driver.MWAllocator.
func (pd *PD) AllocMW(v *verbs.MW, typ verbs.MWType) (driver.MW, error) {
	d := pd.ctx.dev
	mw := &MW{v: v, pd: pd, typ: typ, dev: d}
	mw.cur = &MR{pd: pd, win: mw}
	if err := d.mrs.add(mw.cur, d.cfg.Attr.MaxMR); err != nil {
		return nil, err
	}
	mw.rkey.Store(mw.cur.key)
	pd.refs.Add(1)
	return mw, nil
}

// RKey implements driver.MW.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// Dealloc implements driver.MW: a bound window's key stops working (and
// its direct mappings are withdrawn) before Dealloc returns.
func (mw *MW) Dealloc() error {
	mw.mu.Lock()
	if mw.gone {
		mw.mu.Unlock()
		return fmt.Errorf("%w: memory window already deallocated", verbs.ErrClosed)
	}
	mw.gone = true
	cur := mw.cur
	mw.dev.mrs.remove(cur)
	mw.mu.Unlock()
	cur.revoke()
	if cur.target != nil {
		cur.target.windows.Add(-1)
	}
	mw.pd.refs.Add(-1)
	return nil
}

// mwOf returns the engine's window behind v.
func mwOf(v *verbs.MW) (*MW, bool) {
	mw, ok := driver.MWOf(v).(*MW)
	return mw, ok
}

// mrOf returns the engine's region behind v.
func mrOf(v *verbs.MR) (*MR, bool) {
	mr, ok := driver.MROf(v).(*MR)
	return mr, ok
}

// checkBind is check's part for a BIND_MW request: what can be known when
// it is posted (the rest is the bind's, when it runs).
func (q *QP) checkBind(wr *verbs.SendWR) error {
	b := wr.BindMW
	if b == nil || b.MW == nil {
		return fmt.Errorf("%w: BIND_MW without a window (SendWR.BindMW)", verbs.ErrInvalid)
	}
	if len(wr.SGList) != 0 {
		return fmt.Errorf("%w: BIND_MW carries no data", verbs.ErrInvalid)
	}
	if mw, ok := mwOf(b.MW); !ok || mw.dev != q.dev {
		return fmt.Errorf("%w: memory window of another device", verbs.ErrInvalid)
	}
	if b.Info.Length > 0 && b.Info.MR == nil {
		return fmt.Errorf("%w: BIND_MW of %d bytes without a memory region", verbs.ErrInvalid, b.Info.Length)
	}
	return nil
}

// The access a window may grant.
const mwAccess = verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic

// bind carries out a BIND_MW request on q (the rules of IBA's 10.6.7 and
// ibv_bind_mw(3), as Linux rxe checks them). A broken rule gives
// WCMWBindErr and leaves the window as it was.
func (q *QP) bind(b *verbs.BindMW) verbs.WCStatus {
	mw, ok := mwOf(b.MW)
	if !ok {
		return verbs.WCMWBindErr
	}
	in := &b.Info
	var target *MR
	if in.Length > 0 {
		if target, ok = mrOf(in.MR); !ok || target.dev != q.dev {
			return verbs.WCMWBindErr
		}
		// Counted first, then checked: a Dereg that races sees the count
		// or the bind sees the region gone (see MR.Dereg).
		target.windows.Add(1)
	}
	old, st := q.bindLocked(mw, b, target)
	if st != verbs.WCSuccess {
		if target != nil {
			target.windows.Add(-1)
		}
		return st
	}
	old.revoke()
	if old.target != nil {
		old.target.windows.Add(-1)
	}
	return st
}

// bindLocked is bind's work under the window's lock; it returns the
// entry the bind replaced, for the caller to revoke.
func (q *QP) bindLocked(mw *MW, b *verbs.BindMW, target *MR) (*MR, verbs.WCStatus) {
	in := &b.Info
	mw.mu.Lock()
	defer mw.mu.Unlock()
	cur := mw.cur
	switch {
	case mw.gone, b.RKey>>8 != cur.key>>8, mw.pd != q.pd:
		return nil, verbs.WCMWBindErr
	case in.Access&^mwAccess != 0: // zero-based windows included
		return nil, verbs.WCMWBindErr
	case mw.typ == verbs.MWType2 && (target == nil || cur.valid.Load()):
		return nil, verbs.WCMWBindErr // bound already (o10-37.2.30), or a bind of nothing
	}
	n := &MR{pd: mw.pd, win: mw, dev: mw.dev, key: cur.key&^0xFF | b.RKey&0xFF, access: in.Access}
	if target != nil {
		if target.gone.Load() || !target.valid.Load() || target.win != nil || target.pd != mw.pd ||
			target.access&verbs.AccessMWBind == 0 ||
			in.Access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && target.access&verbs.AccessLocalWrite == 0 ||
			in.Addr < target.addr || in.Addr-target.addr > uint64(len(target.buf)) || in.Length > uint64(len(target.buf))-(in.Addr-target.addr) {
			return nil, verbs.WCMWBindErr
		}
		off := in.Addr - target.addr
		n.buf, n.addr, n.target = target.buf[off:off+in.Length:off+in.Length], in.Addr, target
		if mw.typ == verbs.MWType2 {
			n.wqp = q
		}
		n.valid.Store(true)
	}
	mw.dev.mrs.replace(cur, n)
	mw.cur = n
	return cur, verbs.WCSuccess
}

// invalidateKey is LOCAL_INV (local) and a Send with Invalidate's request
// (from the peer): the type 2 window or the region that rkey names, of
// q's PD, stops working. A type 1 window cannot be invalidated so
// (o10-37.2.26).
func (q *QP) invalidateKey(rkey uint32) Fault {
	mr := q.dev.mrs.lookup(rkey)
	if mr == nil {
		return FaultKey
	}
	if mr.pd != q.pd {
		return FaultPD
	}
	mw := mr.win
	if mw == nil {
		mr.invalidate()
		return FaultNone
	}
	if mw.typ == verbs.MWType1 {
		return FaultAccess
	}
	mw.mu.Lock()
	if mw.gone || mw.cur != mr {
		mw.mu.Unlock()
		return FaultKey
	}
	n := &MR{pd: mw.pd, win: mw, dev: mw.dev, key: mr.key}
	mw.dev.mrs.replace(mr, n)
	mw.cur = n
	mw.mu.Unlock()
	mr.revoke()
	if mr.target != nil {
		mr.target.windows.Add(-1)
	}
	return FaultNone
}

// local carries out a request that stays on this side (BIND_MW,
// LOCAL_INV), from the transmitting loop with q.mu released.
func (q *QP) local(w *WQE) verbs.WCStatus {
	if w.WR.Opcode == verbs.WRBindMW {
		return q.bind(&w.bind)
	}
	if q.invalidateKey(w.WR.InvalidateRKey) != FaultNone {
		return verbs.WCLocQPOpErr // as rxe reports a failed local invalidate
	}
	return verbs.WCSuccess
}

// Rereg implements driver.MRRereger: the region's new description takes
// its table slot under a new key, and the old keys stop working (with
// their direct mappings) before Rereg returns.
func (mr *MR) Rereg(pdd driver.PD, buf []byte, addr uint64, access verbs.AccessFlags) (driver.MR, error) {
	pd, ok := pdd.(*PD)
	if !ok || pd.ctx.dev != mr.dev {
		return nil, fmt.Errorf("%w: protection domain of another device", verbs.ErrInvalid)
	}
	if uint64(len(buf)) > mr.dev.cfg.Attr.MaxMRSize {
		return nil, fmt.Errorf("%w: region of %d bytes exceeds the device's %d", verbs.ErrInvalid, len(buf), mr.dev.cfg.Attr.MaxMRSize)
	}
	if mr.gone.Load() {
		return nil, fmt.Errorf("%w: memory region deregistered", verbs.ErrClosed)
	}
	if n := mr.windows.Load(); n > 0 {
		return nil, fmt.Errorf("%w: %d memory windows are bound to the region", verbs.ErrBusy, n)
	}
	n := &MR{v: mr.v, pd: pd, buf: buf, addr: addr, access: access, dev: mr.dev}
	if !mr.dev.mrs.rekey(mr, n) {
		return nil, fmt.Errorf("%w: memory region deregistered", verbs.ErrClosed)
	}
	// The old entry is retired: it is no longer in the table and is never
	// deregistered itself; its PD reference passes to the new one.
	mr.gone.Store(true)
	pd.refs.Add(1)
	mr.pd.refs.Add(-1)
	mr.revoke()
	return n, nil
}
