package conformance

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3)'s
// IBV_WR_BIND_MW and IBV_WR_LOCAL_INV, IBA 10.6.7), re-registration
// (ibv_rereg_mr(3)) and CQ resizing (ibv_resize_cq(3)).

func init() {
	mw := func(c Caps) bool { return c.MemoryWindows }
	register(
		Case{Name: "MWType1BindGrantsTheWindowOnly", Need: mw, Run: testMWType1Bind},
		Case{Name: "MWType1ZeroLengthBindUnbinds", Need: mw, Run: testMWType1Unbind},
		Case{Name: "MWType1RebindRetiresTheOldKey", Need: mw, Run: testMWType1Rebind},
		Case{Name: "MWType2BindLocalInvalidateRebind", Need: mw, Run: testMWType2Cycle},
		Case{Name: "MWType2AnswersItsQPOnly", Need: mw, Run: testMWType2OtherQP},
		Case{Name: "MWType2SendWithInvalidate", Need: func(c Caps) bool { return c.MemoryWindows && c.Invalidate }, Run: testMWType2SendWithInv},
		Case{Name: "MWBindBreakingARuleGivesMWBindErr", Need: mw, Run: testMWBindErrors},
		Case{Name: "MWType1CannotBeLocallyInvalidated", Need: mw, Run: testMWType1LocalInv},
		Case{Name: "MWObjectRules", Need: mw, Run: testMWObjectRules},
		Case{Name: "MWNotSupported", Need: func(c Caps) bool { return !c.MemoryWindows }, Run: testMWNotSupported},
		Case{Name: "ReregMRChangesAccessAndKeys", Need: func(c Caps) bool { return c.Rereg }, Run: testReregAccess},
		Case{Name: "ReregMRChangesTranslation", Need: func(c Caps) bool { return c.Rereg }, Run: testReregTranslation},
		Case{Name: "ReregMRChangesPD", Need: func(c Caps) bool { return c.Rereg }, Run: testReregPD},
		Case{Name: "ReregMRErrors", Need: func(c Caps) bool { return c.Rereg }, Run: testReregErrors},
		Case{Name: "ReregMRNotSupported", Need: func(c Caps) bool { return !c.Rereg }, Run: testReregNotSupported},
		Case{Name: "ResizeCQKeepsCompletions", Need: func(c Caps) bool { return c.ResizeCQ }, Run: testResizeCQ},
		Case{Name: "ResizeCQErrors", Need: func(c Caps) bool { return c.ResizeCQ }, Run: testResizeCQErrors},
		Case{Name: "ResizeCQNotSupported", Need: func(c Caps) bool { return !c.ResizeCQ }, Run: testResizeCQNotSupported},
	)
}

const mwAccessAll = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessMWBind

// mwPair is a connected pair whose regions allow binding windows.
func mwPair(t *testing.T, f Fixture) (a, b *Side) {
	return NewPair(t, f, PairOpts{Access: mwAccessAll})
}

// mwAlloc allocates a window on s's PD, deallocated when t ends.
func mwAlloc(t *testing.T, s *Side, typ verbs.MWType) *verbs.MW {
	t.Helper()
	mw, err := s.PD.AllocMW(typ)
	if err != nil {
		t.Fatalf("AllocMW(%v): %v", typ, err)
	}
	if mw.Type() != typ || mw.PD() != s.PD {
		t.Fatalf("window of type %v on PD %p, want %v on %p", mw.Type(), mw.PD(), typ, s.PD)
	}
	t.Cleanup(func() { mw.Dealloc() })
	return mw
}

// mwBind1 binds the type 1 window mw on s's QP to n bytes at off of s's
// region and waits for the bind's completion; it returns the new key.
func mwBind1(t *testing.T, s *Side, mw *verbs.MW, off, n int, acc verbs.AccessFlags) uint32 {
	t.Helper()
	old := mw.RKey()
	rkey, err := s.QP.BindMW(mw, verbs.MWBind{WRID: 50, Flags: verbs.SendSignaled,
		Info: verbs.MWBindInfo{MR: s.MR, Addr: s.MR.RemoteAddr(off), Length: uint64(n), Access: acc}})
	if err != nil {
		t.Fatalf("BindMW: %v", err)
	}
	// ibv_bind_mw(3): the new R_key is returned in mw->rkey; it is the old
	// one with the next key byte (ibv_inc_rkey).
	if rkey != verbs.IncRKey(old) || mw.RKey() != rkey || rkey>>8 != old>>8 || rkey == old {
		t.Fatalf("BindMW gave rkey %#x (mw.RKey %#x), old %#x: want ibv_inc_rkey of the old", rkey, mw.RKey(), old)
	}
	ExpectWC(t, Poll1(t, s.SendCQ), 50, verbs.WCSuccess, verbs.WCBindMW)
	return rkey
}

// mwBind2 binds the type 2 window mw on s's QP with a BIND_MW work request
// and waits for its completion; it returns the new key.
func mwBind2(t *testing.T, s *Side, mw *verbs.MW, off, n int, acc verbs.AccessFlags) uint32 {
	t.Helper()
	rkey := verbs.IncRKey(mw.RKey())
	s.MustPostSend(t, verbs.SendWR{WRID: 51, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, BindMW: &verbs.BindMW{MW: mw, RKey: rkey,
		Info: verbs.MWBindInfo{MR: s.MR, Addr: s.MR.RemoteAddr(off), Length: uint64(n), Access: acc}}})
	ExpectWC(t, Poll1(t, s.SendCQ), 51, verbs.WCSuccess, verbs.WCBindMW)
	if mw.RKey() != rkey {
		t.Fatalf("window key %#x after a bind with %#x", mw.RKey(), rkey)
	}
	return rkey
}

// mwWrite writes n bytes of a's buffer to raddr through rkey and expects
// success.
func mwWrite(t *testing.T, a *Side, wrid uint64, n int, raddr uint64, rkey uint32) {
	t.Helper()
	a.MustPostSend(t, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, n)}, RemoteAddr: raddr, RKey: rkey})
	ExpectWC(t, Poll1(t, a.SendCQ), wrid, verbs.WCSuccess, verbs.WCRDMAWrite)
}

// mwSync waits until the responder b has executed a's requests so far: a
// read behind them (through b's region) completes only then, where a
// write may complete once sent (iWARP).
func mwSync(t *testing.T, a, b *Side) {
	t.Helper()
	mwRead(t, a, 0x5e, 1, b.MR.RemoteAddr(0), b.MR.RKey())
}

// mwRead reads n bytes at raddr through rkey into a's buffer at 8192 and
// expects success (a read's completion means the responder executed it).
func mwRead(t *testing.T, a *Side, wrid uint64, n int, raddr uint64, rkey uint32) []byte {
	t.Helper()
	a.MustPostSend(t, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(8192, n)}, RemoteAddr: raddr, RKey: rkey})
	ExpectWC(t, Poll1(t, a.SendCQ), wrid, verbs.WCSuccess, verbs.WCRDMARead)
	return a.Buf[8192 : 8192+n]
}

// MWType1BindGrantsTheWindowOnly: a bound type 1 window's key gives the
// peer the window's range with the window's access, and no more: a write
// through a read-only window, or past its end, is a remote access
// violation, and the region's own key still works (ibv_bind_mw(3)).
func testMWType1Bind(t *testing.T, f Fixture) {
	t.Run("InRange", func(t *testing.T) {
		a, b := mwPair(t, f)
		mw := mwAlloc(t, b, verbs.MWType1)
		rkey := mwBind1(t, b, mw, 4096, 1024, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		Fill(a.Buf[:256], 0x31)
		mwWrite(t, a, 1, 256, b.MR.RemoteAddr(4096+512), rkey)
		if got := mwRead(t, a, 2, 256, b.MR.RemoteAddr(4096+512), rkey); !bytes.Equal(got, a.Buf[:256]) || !bytes.Equal(b.Buf[4096+512:4096+768], a.Buf[:256]) {
			t.Fatal("data written through the window is not in the region")
		}
		mwWrite(t, a, 3, 16, b.MR.RemoteAddr(0), b.MR.RKey()) // the region's key is unchanged
	})
	t.Run("PastTheEnd", func(t *testing.T) {
		a, b := mwPair(t, f)
		mw := mwAlloc(t, b, verbs.MWType1)
		rkey := mwBind1(t, b, mw, 4096, 1024, verbs.AccessRemoteWrite)
		errRemoteViolation(t, f, a, b, errWriteWR(a, 64, b.MR.RemoteAddr(4096+1024-32), rkey))
	})
	t.Run("ReadOnlyWindow", func(t *testing.T) {
		a, b := mwPair(t, f)
		mw := mwAlloc(t, b, verbs.MWType1)
		rkey := mwBind1(t, b, mw, 0, 4096, verbs.AccessRemoteRead)
		mwRead(t, a, 2, 64, b.MR.RemoteAddr(0), rkey)
		errRemoteViolation(t, f, a, b, errWriteWR(a, 64, b.MR.RemoteAddr(128), rkey))
	})
	t.Run("NotALocalKey", func(t *testing.T) {
		// A window's key names remote memory only: as an SGE's lkey it
		// is an unknown key (LOC_PROT_ERR).
		a, b := mwPair(t, f)
		mw := mwAlloc(t, b, verbs.MWType1)
		rkey := mwBind1(t, b, mw, 0, 4096, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
		errFailAndFlush(t, b, a, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: b.MR.RemoteAddr(0), Length: 16, LKey: rkey}}}, verbs.WCLocProtErr)
	})
}

// MWType1ZeroLengthBindUnbinds: binding a type 1 window with length 0 and
// no region unbinds it; its key then fails as an unknown one.
func testMWType1Unbind(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	mw := mwAlloc(t, b, verbs.MWType1)
	rkey := mwBind1(t, b, mw, 0, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	mwRead(t, a, 1, 16, b.MR.RemoteAddr(0), rkey)
	if _, err := b.QP.BindMW(mw, verbs.MWBind{WRID: 60, Flags: verbs.SendSignaled}); err != nil {
		t.Fatalf("BindMW of length 0: %v", err)
	}
	ExpectWC(t, Poll1(t, b.SendCQ), 60, verbs.WCSuccess, verbs.WCBindMW)
	errRemoteViolation(t, f, a, b, errWriteWR(a, 16, b.MR.RemoteAddr(0), rkey))
}

// MWType1RebindRetiresTheOldKey: a type 1 window may be bound again while
// bound; the previous key stops working and the new one grants the new
// range.
func testMWType1Rebind(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	mw := mwAlloc(t, b, verbs.MWType1)
	k1 := mwBind1(t, b, mw, 0, 1024, verbs.AccessRemoteRead)
	k2 := mwBind1(t, b, mw, 8192, 1024, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	Fill(a.Buf[:64], 0x52)
	mwWrite(t, a, 1, 64, b.MR.RemoteAddr(8192), k2)
	mwSync(t, a, b)
	if !bytes.Equal(b.Buf[8192:8192+64], a.Buf[:64]) {
		t.Fatal("write through the rebound window did not land")
	}
	wr := verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(8192, 16)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: k1}
	b.MustPostRecv(t, b.Recv(100, 0, 64))
	errFailRemote(t, f, a, b, wr, verbs.WCRemAccessErr)
	errResponderFatal(t, f, b, verbs.EventQPAccessErr, 100)
}

// MWType2BindLocalInvalidateRebind: a type 2 window is bound by a BIND_MW
// work request with the key the caller chose (ibv_inc_rkey), invalidated
// by LOCAL_INV (its key then fails), and only then bound again, with a
// new key.
func testMWType2Cycle(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	mw := mwAlloc(t, b, verbs.MWType2)
	k1 := mwBind2(t, b, mw, 0, 4096, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	Fill(a.Buf[:32], 0x21)
	mwWrite(t, a, 1, 32, b.MR.RemoteAddr(64), k1)
	mwSync(t, a, b)
	if !bytes.Equal(b.Buf[64:96], a.Buf[:32]) {
		t.Fatal("write through the type 2 window did not land")
	}
	b.MustPostSend(t, verbs.SendWR{WRID: 70, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: k1})
	ExpectWC(t, Poll1(t, b.SendCQ), 70, verbs.WCSuccess, verbs.WCLocalInv)
	k2 := mwBind2(t, b, mw, 4096, 4096, verbs.AccessRemoteRead)
	if k2 == k1 {
		t.Fatalf("rebound with the same key %#x", k2)
	}
	mwRead(t, a, 2, 64, b.MR.RemoteAddr(4096), k2)
	b.MustPostRecv(t, b.Recv(100, 0, 64))
	wr := verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(8192, 16)}, RemoteAddr: b.MR.RemoteAddr(64), RKey: k1}
	errFailRemote(t, f, a, b, wr, verbs.WCRemAccessErr)
	errResponderFatal(t, f, b, verbs.EventQPAccessErr, 100)
}

// MWType2AnswersItsQPOnly: a type 2 window is bound to the QP that bound
// it (IBA 10.6.7.2.2): another QP of the same PD cannot reach memory
// through its key.
func testMWType2OtherQP(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	mw := mwAlloc(t, b, verbs.MWType2)
	rkey := mwBind2(t, b, mw, 0, 4096, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	a2 := mwSecondConn(t, f, a, b)
	mwRead(t, a, 1, 16, b.MR.RemoteAddr(0), rkey) // through the QP it is bound to
	a2.MustPostSend(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a2.MR.SGE(0, 16)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: rkey})
	wc := Poll1(t, a2.SendCQ)
	if wc.WRID != 2 || wc.Status == verbs.WCSuccess {
		t.Fatalf("read through another QP's type 2 window: %s, want a remote access error", Describe(wc))
	}
	if !f.Caps().AsyncErrors && wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("read through another QP's type 2 window: %s, want REM_ACCESS_ERR", Describe(wc))
	}
}

// mwSecondConn connects a new side on a's context to a new QP in b's PD
// (using b's CQs) and returns the new side.
func mwSecondConn(t *testing.T, f Fixture, a, b *Side) *Side {
	t.Helper()
	a2 := NewSide(t, a.Ctx, verbs.QPTRC, PairOpts{Access: mwAccessAll})
	q2, err := b.PD.CreateQP(verbs.QPInitAttr{SendCQ: b.SendCQ, RecvCQ: b.RecvCQ, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	t.Cleanup(func() { q2.Destroy() })
	if err := f.Connect(t, a2.QP, q2, DefaultRC); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return a2
}

// MWType2SendWithInvalidate: a peer's SEND_WITH_INV naming a type 2
// window's key invalidates the window (ibv_post_send(3)); the receive
// completion reports the key.
func testMWType2SendWithInv(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	mw := mwAlloc(t, b, verbs.MWType2)
	rkey := mwBind2(t, b, mw, 0, 4096, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	mwRead(t, a, 1, 16, b.MR.RemoteAddr(0), rkey)
	b.MustPostRecv(t, b.Recv(100, 16384, 4096))
	a.MustPostSend(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey,
		SGList: []verbs.SGE{a.MR.SGE(0, 32)}})
	ExpectWC(t, Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 100, verbs.WCSuccess, verbs.WCRecv)
	if wc.Flags&verbs.WCFlagWithInv == 0 || wc.ImmData != rkey {
		t.Fatalf("receive %+v: want WITH_INV and the window's key %#x", wc, rkey)
	}
	// Free again: it binds anew.
	k2 := mwBind2(t, b, mw, 0, 64, verbs.AccessRemoteRead)
	mwRead(t, a, 3, 16, b.MR.RemoteAddr(0), k2)
	b.MustPostRecv(t, b.Recv(101, 16384, 64))
	wr := verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(8192, 16)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: rkey}
	Fill(b.Buf, 0x77)
	errFailRemote(t, f, a, b, wr, verbs.WCRemAccessErr)
	errResponderFatal(t, f, b, verbs.EventQPAccessErr, 101)
}

// MWBindBreakingARuleGivesMWBindErr: a bind that breaks one of the rules
// of IBA 10.6.7 (the region lacks IBV_ACCESS_MW_BIND; remote write on a
// region without local write; the range outside the region; a key whose
// index is not the window's; a type 2 window bound already; an access
// flag a window cannot have) completes with IBV_WC_MW_BIND_ERR, the QP
// goes to ERR and the requests behind the bind flush.
func testMWBindErrors(t *testing.T, f Fixture) {
	type tc struct {
		name string
		typ  verbs.MWType
		bind func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW
	}
	in := func(b *Side, off, n int, acc verbs.AccessFlags) verbs.MWBindInfo {
		return verbs.MWBindInfo{MR: b.MR, Addr: b.MR.RemoteAddr(off), Length: uint64(n), Access: acc}
	}
	for _, c := range []tc{
		{"RegionWithoutMWBind", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			mr := errRegWindow(t, b, 0, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey()), Info: verbs.MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: verbs.AccessRemoteRead}}
		}},
		{"RemoteWriteWithoutLocalWrite", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			mr := errRegWindow(t, b, 0, 4096, verbs.AccessRemoteRead|verbs.AccessMWBind)
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey()), Info: verbs.MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: verbs.AccessRemoteWrite}}
		}},
		{"PastTheRegion", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey()), Info: in(b, b.MR.Len()-64, 128, verbs.AccessRemoteRead)}
		}},
		{"ForeignKeyIndex", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			return &verbs.BindMW{MW: mw, RKey: mw.RKey() ^ 0x100, Info: in(b, 0, 64, verbs.AccessRemoteRead)}
		}},
		{"Type2BoundAlready", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			mwBind2(t, b, mw, 0, 64, verbs.AccessRemoteRead)
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey()), Info: in(b, 0, 64, verbs.AccessRemoteRead)}
		}},
		{"Type2OfNothing", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey())}
		}},
		{"ZeroBasedWindow", verbs.MWType2, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey()), Info: in(b, 0, 64, verbs.AccessRemoteRead|verbs.AccessZeroBased)}
		}},
		{"Type1RegionWithoutMWBind", verbs.MWType1, func(t *testing.T, b *Side, mw *verbs.MW) *verbs.BindMW {
			mr := errRegWindow(t, b, 0, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
			return &verbs.BindMW{MW: mw, RKey: verbs.IncRKey(mw.RKey()), Info: verbs.MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: verbs.AccessRemoteRead}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := mwPair(t, f)
			mw := mwAlloc(t, b, c.typ)
			bind := c.bind(t, b, mw)
			errFailAndFlush(t, b, a, verbs.SendWR{WRID: 80, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, BindMW: bind}, verbs.WCMWBindErr)
		})
	}
}

// MWType1CannotBeLocallyInvalidated: LOCAL_INV of a type 1 window's key
// fails (IBA o10-37.2.26; rxe completes it with IBV_WC_LOC_QP_OP_ERR) and
// the window keeps working, through any QP of its PD (the one that posted
// the LOCAL_INV is in ERR).
func testMWType1LocalInv(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	a2 := mwSecondConn(t, f, a, b)
	mw := mwAlloc(t, b, verbs.MWType1)
	rkey := mwBind1(t, b, mw, 0, 4096, verbs.AccessRemoteRead)
	errFailAndFlush(t, b, a, verbs.SendWR{WRID: 90, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey}, verbs.WCLocQPOpErr)
	mwRead(t, a2, 1, 16, b.MR.RemoteAddr(0), rkey)
}

// MWObjectRules: the object rules around windows: an unknown type is
// EINVAL (ibv_alloc_mw(3)); ibv_bind_mw is for type 1 windows only; a
// region with a window bound cannot be deregistered (EBUSY) until the
// window is deallocated, nor its PD freed; Dealloc makes a bound key fail
// at once and a second Dealloc is nil (goverbs' rule for every second
// release); a BIND_MW work request without
// a window, and one on a UD QP, are refused at the post (EINVAL).
func testMWObjectRules(t *testing.T, f Fixture) {
	a, b := mwPair(t, f)
	if _, err := b.PD.AllocMW(3); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("AllocMW(3): %v, want ErrInvalid", err)
	}
	mw2 := mwAlloc(t, b, verbs.MWType2)
	if _, err := b.QP.BindMW(mw2, verbs.MWBind{}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("BindMW of a type 2 window: %v, want ErrInvalid", err)
	}
	err := b.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRBindMW}})
	ExpectPostErr(t, err, 0, verbs.ErrInvalid)

	mw, err := b.PD.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	rkey := mwBind1(t, b, mw, 0, 4096, verbs.AccessRemoteRead)
	if err := b.MR.Dereg(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dereg of a region with a bound window: %v, want ErrBusy", err)
	}
	mwRead(t, a, 1, 16, b.MR.RemoteAddr(0), rkey) // the region is still registered
	if err := mw.Dealloc(); err != nil {
		t.Fatalf("Dealloc: %v", err)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatalf("second Dealloc: %v, want nil", err)
	}
	if err := mw2.Dealloc(); err != nil {
		t.Fatalf("Dealloc: %v", err)
	}
	errRemoteViolation(t, f, a, b, errWriteWR(a, 16, b.MR.RemoteAddr(0), rkey))

	// A window keeps its PD busy.
	ctx := b.Ctx
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	w, err := pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dealloc of a PD with a window: %v, want ErrBusy", err)
	}
	w.Dealloc()
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("Dealloc of the PD: %v", err)
	}
}

// MWNotSupported: a provider without memory windows says so
// (EOPNOTSUPP), and a BIND_MW it cannot carry out is refused at the post.
func testMWNotSupported(t *testing.T, f Fixture) {
	_, b := NewPair(t, f, PairOpts{})
	if _, err := b.PD.AllocMW(verbs.MWType2); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("AllocMW: %v, want ErrNotSupported", err)
	}
}

// ReregMRChangesAccessAndKeys: IBV_REREG_MR_CHANGE_ACCESS gives the region
// new rights: a remote write refused before succeeds with the region's new
// key afterwards, and the key from before no longer works.
func testReregAccess(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	mr := errRegWindow(t, b, 16384, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	oldR := mr.RKey()
	mwRead(t, a, 1, 16, mr.RemoteAddr(0), oldR)
	if err := mr.Rereg(verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
		t.Fatalf("Rereg: %v", err)
	}
	if mr.Access() != verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite || mr.Len() != 4096 || mr.PD() != b.PD {
		t.Fatalf("after Rereg: access %v len %d", mr.Access(), mr.Len())
	}
	Fill(a.Buf[:64], 0x99)
	mwWrite(t, a, 2, 64, mr.RemoteAddr(0), mr.RKey())
	mwSync(t, a, b)
	if !bytes.Equal(b.Buf[16384:16384+64], a.Buf[:64]) {
		t.Fatal("write after Rereg did not land")
	}
	if mr.RKey() != oldR {
		errRemoteViolation(t, f, a, b, errWriteWR(a, 16, mr.RemoteAddr(0), oldR))
	}
}

// ReregMRChangesTranslation: IBV_REREG_MR_CHANGE_TRANSLATION moves the
// region to other memory: the peer's accesses land there, and the old
// memory is no longer reachable.
func testReregTranslation(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	mr := errRegWindow(t, b, 16384, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	newBuf := b.Buf[32768 : 32768+8192]
	if err := mr.Rereg(verbs.ReregTranslation, nil, newBuf, 0); err != nil {
		t.Fatalf("Rereg: %v", err)
	}
	if mr.Len() != 8192 || &mr.Bytes()[0] != &newBuf[0] || mr.Addr() != b.MR.RemoteAddr(32768) {
		t.Fatalf("after Rereg: len %d addr %#x, want 8192 at %#x", mr.Len(), mr.Addr(), b.MR.RemoteAddr(32768))
	}
	Fill(a.Buf[:64], 0x44)
	mwWrite(t, a, 1, 64, mr.RemoteAddr(8192-64), mr.RKey())
	mwSync(t, a, b)
	if !bytes.Equal(newBuf[8192-64:], a.Buf[:64]) {
		t.Fatal("write after Rereg did not land in the new memory")
	}
	// Locally too: a SEND from the moved region carries the new memory.
	b.MustPostSend(t, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(8192-64, 64)}, RemoteAddr: a.MR.RemoteAddr(1024), RKey: a.MR.RKey()})
	ExpectWC(t, Poll1(t, b.SendCQ), 5, verbs.WCSuccess, verbs.WCRDMAWrite)
	mwSync(t, b, a)
	if !bytes.Equal(a.Buf[1024:1024+64], a.Buf[:64]) {
		t.Fatal("write from the moved region carried other data")
	}
}

// ReregMRChangesPD: IBV_REREG_MR_CHANGE_PD moves the region to another
// PD: a QP of the old PD can no longer use it (LOC_PROT_ERR).
func testReregPD(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	pd2, err := b.Ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	mr, err := b.PD.RegMR(b.Buf[16384:16384+4096], verbs.AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	if err := mr.Rereg(verbs.ReregPD, pd2, nil, 0); err != nil {
		t.Fatalf("Rereg: %v", err)
	}
	if mr.PD() != pd2 {
		t.Fatal("PD() is not the new PD")
	}
	if err := pd2.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dealloc of the region's new PD: %v, want ErrBusy", err)
	}
	errFailAndFlush(t, b, a, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 16)}}, verbs.WCLocProtErr)
	if err := mr.Dereg(); err != nil {
		t.Fatalf("Dereg: %v", err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatalf("Dealloc: %v", err)
	}
}

// ReregMRErrors: no flag, or arguments ibv_reg_mr would refuse, are
// EINVAL and leave the region as it was; a deregistered region cannot be
// re-registered; a region with a bound window is busy.
func testReregErrors(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Access: mwAccessAll})
	mr := errRegWindow(t, b, 16384, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	k := mr.RKey()
	for _, c := range []struct {
		name   string
		flags  verbs.ReregFlags
		buf    []byte
		access verbs.AccessFlags
	}{
		{"NoFlag", 0, nil, 0},
		{"UnknownFlag", 8, nil, 0},
		{"RemoteWriteWithoutLocalWrite", verbs.ReregAccess, nil, verbs.AccessRemoteWrite},
		{"EmptyMemory", verbs.ReregTranslation, nil, 0},
	} {
		if err := mr.Rereg(c.flags, nil, c.buf, c.access); !errors.Is(err, verbs.ErrInvalid) {
			t.Fatalf("%s: Rereg: %v, want ErrInvalid", c.name, err)
		}
	}
	if err := mr.Rereg(verbs.ReregPD, nil, nil, 0); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Rereg to a nil PD: %v, want ErrInvalid", err)
	}
	if mr.RKey() != k {
		t.Fatal("a refused Rereg changed the key")
	}
	mwRead(t, a, 1, 16, mr.RemoteAddr(0), k)
	if f.Caps().MemoryWindows {
		mw := mwAlloc(t, b, verbs.MWType1)
		mwBind1(t, b, mw, 0, 64, verbs.AccessRemoteRead)
		if err := b.MR.Rereg(verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Rereg of a region with a bound window: %v, want ErrBusy", err)
		}
		mw.Dealloc()
	}
	if err := mr.Dereg(); err != nil {
		t.Fatalf("Dereg: %v", err)
	}
	if err := mr.Rereg(verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Rereg after Dereg: %v, want ErrClosed", err)
	}
}

// ReregMRNotSupported: a provider without ibv_rereg_mr says so.
func testReregNotSupported(t *testing.T, f Fixture) {
	_, b := NewPair(t, f, PairOpts{})
	if err := b.MR.Rereg(verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Rereg: %v, want ErrNotSupported", err)
	}
}

// ResizeCQKeepsCompletions: ibv_resize_cq(3) gives the CQ at least the
// asked-for entries (CQE reports them) and keeps the completions it holds,
// in order; the grown CQ then holds more than before without overflow.
func testResizeCQ(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{CQE: 4})
	n0 := a.SendCQ.CQE()
	if n0 != 4 {
		t.Fatalf("CQE %d for a CQ of 4", n0) // (the counts below rely on it)
	}
	read := func(id uint64) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(8192, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()}
	}
	for i := range n0 {
		a.MustPostSend(t, read(uint64(200+i)))
	}
	waitHeld(t, a.SendCQ, n0) // the CQ is full
	want := 4 * n0
	if err := a.SendCQ.Resize(want); err != nil {
		t.Fatalf("Resize(%d): %v", want, err)
	}
	if got := a.SendCQ.CQE(); got < want {
		t.Fatalf("CQE %d after Resize(%d)", got, want)
	}
	// Room for 3*n0 more now: an overflow would fail the polls below.
	for i := range 3 * n0 {
		a.MustPostSend(t, read(uint64(300+i)))
		if i%4 == 3 {
			waitHeld(t, a.SendCQ, n0+i+1) // (the send queue holds 16)
		}
	}
	waitHeld(t, a.SendCQ, want)
	for i, wc := range PollN(t, a.SendCQ, want) {
		id := uint64(200 + i)
		if i >= n0 {
			id = uint64(300 + i - n0)
		}
		ExpectWC(t, wc, id, verbs.WCSuccess, verbs.WCRDMARead)
	}
	// And it shrinks when empty.
	if err := a.SendCQ.Resize(2); err != nil {
		t.Fatalf("Resize(2) of an empty CQ: %v", err)
	}
	if a.SendCQ.CQE() < 2 {
		t.Fatalf("CQE %d after Resize(2)", a.SendCQ.CQE())
	}
	mwWrite(t, a, 400, 8, b.MR.RemoteAddr(0), b.MR.RKey())
}

// waitHeld waits until cq holds n completions without taking them: Resize
// refuses a size below the completions held (ibv_resize_cq(3)), so
// Resize(n-1) fails once n are there. Until then it succeeds, and leaves
// the CQ room for n at least: n-1 must not be a power of two above 1,
// since the CQ's size is rounded up to one, and no more than n completions
// may be on their way. The CQ gets its size back at the end.
func waitHeld(t *testing.T, cq *verbs.CQ, n int) {
	t.Helper()
	if m := n - 1; m > 1 && m&(m-1) == 0 {
		t.Fatalf("waitHeld(%d): %d is a power of two", n, m)
	}
	defer func(size int) {
		if err := cq.Resize(size); err != nil {
			t.Fatalf("Resize(%d): %v", size, err)
		}
	}(cq.CQE())
	deadline := time.Now().Add(WaitTimeout)
	for {
		err := cq.Resize(max(n-1, 1))
		if n == 1 {
			// Resize(1) never fails for one completion; wait for it instead.
			c, cancel := context.WithTimeout(context.Background(), WaitTimeout)
			err = cq.Wait(c)
			cancel()
			if err != nil {
				t.Fatalf("Wait: %v", err)
			}
			return
		}
		if errors.Is(err, verbs.ErrInvalid) {
			return
		}
		if err != nil {
			t.Fatalf("Resize(%d): %v", n-1, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CQ does not hold %d completions after %v", n, WaitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// ResizeCQErrors: cqe below 1, above the device's max_cqe, or below the
// number of completions the CQ holds is EINVAL, and the CQ keeps its
// completions.
func testResizeCQErrors(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{CQE: 16})
	if err := a.SendCQ.Resize(0); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Resize(0): %v, want ErrInvalid", err)
	}
	if err := a.SendCQ.Resize(a.Ctx.QueryDevice().MaxCQE + 1); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Resize(max_cqe+1): %v, want ErrInvalid", err)
	}
	for i := range 4 {
		a.MustPostSend(t, verbs.SendWR{WRID: uint64(10 + i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(8192, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	}
	waitHeld(t, a.SendCQ, 4)
	if err := a.SendCQ.Resize(3); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Resize below the completions held: %v, want ErrInvalid", err)
	}
	for i, wc := range PollN(t, a.SendCQ, 4) {
		ExpectWC(t, wc, uint64(10+i), verbs.WCSuccess, verbs.WCRDMARead)
	}
}

// ResizeCQNotSupported: a provider without ibv_resize_cq says so.
func testResizeCQNotSupported(t *testing.T, f Fixture) {
	a, _ := NewPair(t, f, PairOpts{})
	if err := a.SendCQ.Resize(1024); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Resize: %v, want ErrNotSupported", err)
	}
}
