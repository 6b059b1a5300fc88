package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The QP state machine (the transitions and attributes of ibv_modify_qp(3)
// and IB spec 11.2.4.2 / 10.3.1), asynchronous events, object lifetimes and
// the checks made when objects are created.

func init() {
	register(
		Case{Name: "ModifyRequiresAttributes", Need: func(c Caps) bool { return c.Modify }, Run: testModifyRequiresAttributes},
		Case{Name: "ModifyValueChecks", Need: func(c Caps) bool { return c.Modify }, Run: testModifyValueChecks},
		Case{Name: "QueryReportsAttributes", Run: testQueryReportsAttributes},
		Case{Name: "AnyStateToErrAndReset", Need: func(c Caps) bool { return c.Modify }, Run: testAnyStateToErrAndReset},
		Case{Name: "ResetDiscardsWorkWithoutCompletions", Need: func(c Caps) bool { return c.Modify }, Run: testResetDiscardsWorkWithoutCompletions},
		Case{Name: "SQDDrainsAndRaisesEvent", Need: func(c Caps) bool { return c.RNR }, Run: testSQDDrainsAndRaisesEvent},
		Case{Name: "DestroyedQPRejectsPosts", Run: testDestroyedQPRejectsPosts},
		Case{Name: "DestroyResourcesChildrenFirst", Run: testDestroyResourcesChildrenFirst},
		Case{Name: "RegMRAccessRules", Run: testRegMRAccessRules},
		Case{Name: "DeviceAttributesAndPort", Run: testDeviceAttributesAndPort},
		Case{Name: "CreateQPCapsChecked", Run: testCreateQPCapsChecked},
		Case{Name: "CreateQPZeroValueDefaults", Run: testCreateQPZeroValueDefaults},
	)
}

// stRCStep returns the attributes and mask that move an RC QP by hand into st
// (INIT, RTR towards dest, RTS or SQD), with DefaultRC's values and exactly
// the attributes libibverbs requires for that transition.
func stRCStep(t *testing.T, f Fixture, st verbs.QPState, dest *Side) (verbs.QPAttr, verbs.QPAttrMask) {
	t.Helper()
	a := DefaultRC
	a.QPState = st
	switch st {
	case verbs.QPSInit:
		a.PortNum = 1
		return a, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	case verbs.QPSRTR:
		a.AHAttr = f.AHTo(t, dest.Ctx)
		a.DestQPNum = dest.QP.Num()
		return a, verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	case verbs.QPSRTS:
		return a, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	case verbs.QPSSQD:
		return a, verbs.QPAttrState
	}
	t.Fatalf("stRCStep: no step into %v", st)
	return a, 0
}

// stModify applies a transition and checks the state it leads to.
func stModify(t *testing.T, q *verbs.QP, attr verbs.QPAttr, mask verbs.QPAttrMask) {
	t.Helper()
	if err := q.Modify(&attr, mask); err != nil {
		t.Fatalf("Modify %v->%v (%v): %v", q.State(), attr.QPState, mask, err)
	}
	if mask&verbs.QPAttrState != 0 {
		if got := q.State(); got != attr.QPState {
			t.Fatalf("QP in %v after Modify to %v", got, attr.QPState)
		}
	}
}

// stDriveTo moves s's QP, which is in RESET, by hand up to st along
// RESET->INIT->RTR->RTS->SQD, with dest as the destination.
func stDriveTo(t *testing.T, f Fixture, s, dest *Side, st verbs.QPState) {
	t.Helper()
	if got := s.QP.State(); got != verbs.QPSReset {
		t.Fatalf("stDriveTo: QP in %v, want RESET", got)
	}
	for _, step := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD} {
		if st < step {
			return
		}
		a, m := stRCStep(t, f, step, dest)
		stModify(t, s.QP, a, m)
	}
}

// stRefuseModify checks that Modify fails with ErrInvalid and leaves the QP
// exactly as it was (ibv_modify_qp(3): on failure nothing is changed).
func stRefuseModify(t *testing.T, q *verbs.QP, what string, attr verbs.QPAttr, mask verbs.QPAttrMask) {
	t.Helper()
	before, _, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if err := q.Modify(&attr, mask); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("%s: Modify = %v, want ErrInvalid", what, err)
	}
	after, _, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if after != before {
		t.Fatalf("%s: the failed Modify changed the QP:\n before %+v\n after  %+v", what, before, after)
	}
}

// ModifyRequiresAttributes: each transition requires its attribute set and
// allows no attribute outside its required and optional sets; transitions
// that do not exist are refused (ibv_modify_qp(3), IB spec 11.2.4.2, the
// kernel's ib_modify_qp_is_ok). A refused Modify changes nothing.
func testModifyRequiresAttributes(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{NoConnect: true})
	q := a.QP
	init, initM := stRCStep(t, f, verbs.QPSInit, b)
	rtr, rtrM := stRCStep(t, f, verbs.QPSRTR, b)
	rts, rtsM := stRCStep(t, f, verbs.QPSRTS, b)

	stRefuseModify(t, q, "RESET->INIT without PORT", init, initM&^verbs.QPAttrPort)
	stRefuseModify(t, q, "RESET->INIT without PKEY_INDEX", init, initM&^verbs.QPAttrPKeyIndex)
	stRefuseModify(t, q, "RESET->INIT without ACCESS_FLAGS", init, initM&^verbs.QPAttrAccessFlags)
	stRefuseModify(t, q, "RESET->INIT with DEST_QPN", init, initM|verbs.QPAttrDestQPN)
	stRefuseModify(t, q, "RESET->INIT with PATH_MTU", init, initM|verbs.QPAttrPathMTU)
	stRefuseModify(t, q, "RESET->INIT with QKEY on RC", init, initM|verbs.QPAttrQKey)
	stRefuseModify(t, q, "RESET->RTR", rtr, rtrM)
	stRefuseModify(t, q, "RESET->RTS", rts, rtsM)
	stRefuseModify(t, q, "RESET->SQD", verbs.QPAttr{QPState: verbs.QPSSQD}, verbs.QPAttrState)
	stModify(t, q, init, initM)

	stRefuseModify(t, q, "INIT->RTR without DEST_QPN", rtr, rtrM&^verbs.QPAttrDestQPN)
	stRefuseModify(t, q, "INIT->RTR without AV", rtr, rtrM&^verbs.QPAttrAV)
	stRefuseModify(t, q, "INIT->RTR without PATH_MTU", rtr, rtrM&^verbs.QPAttrPathMTU)
	stRefuseModify(t, q, "INIT->RTR without RQ_PSN", rtr, rtrM&^verbs.QPAttrRQPSN)
	stRefuseModify(t, q, "INIT->RTR without MAX_DEST_RD_ATOMIC", rtr, rtrM&^verbs.QPAttrMaxDestRdAtomic)
	stRefuseModify(t, q, "INIT->RTR without MIN_RNR_TIMER", rtr, rtrM&^verbs.QPAttrMinRNRTimer)
	stRefuseModify(t, q, "INIT->RTR with SQ_PSN", rtr, rtrM|verbs.QPAttrSQPSN)
	stRefuseModify(t, q, "INIT->RTS", rts, rtsM)
	stRefuseModify(t, q, "INIT->SQD", verbs.QPAttr{QPState: verbs.QPSSQD}, verbs.QPAttrState)
	stModify(t, q, rtr, rtrM)

	stRefuseModify(t, q, "RTR->RTS without SQ_PSN", rts, rtsM&^verbs.QPAttrSQPSN)
	stRefuseModify(t, q, "RTR->RTS without TIMEOUT", rts, rtsM&^verbs.QPAttrTimeout)
	stRefuseModify(t, q, "RTR->RTS without RETRY_CNT", rts, rtsM&^verbs.QPAttrRetryCnt)
	stRefuseModify(t, q, "RTR->RTS without RNR_RETRY", rts, rtsM&^verbs.QPAttrRNRRetry)
	stRefuseModify(t, q, "RTR->RTS without MAX_QP_RD_ATOMIC", rts, rtsM&^verbs.QPAttrMaxQPRdAtomic)
	stRefuseModify(t, q, "RTR->RTS with DEST_QPN", rts, rtsM|verbs.QPAttrDestQPN)
	stRefuseModify(t, q, "RTR->INIT", init, initM)
	stModify(t, q, rts, rtsM)

	stRefuseModify(t, q, "RTS->RTR", rtr, rtrM)
	stRefuseModify(t, q, "RTS->INIT", init, initM)
	stRefuseModify(t, q, "RTS->RTS with DEST_QPN", verbs.QPAttr{QPState: verbs.QPSRTS, DestQPNum: 5}, verbs.QPAttrState|verbs.QPAttrDestQPN)
	stRefuseModify(t, q, "RTS->RTS with PATH_MTU", verbs.QPAttr{QPState: verbs.QPSRTS, PathMTU: verbs.MTU256}, verbs.QPAttrState|verbs.QPAttrPathMTU)
	stRefuseModify(t, q, "CUR_STATE that is not the current state",
		verbs.QPAttr{QPState: verbs.QPSRTS, CurQPState: verbs.QPSInit}, verbs.QPAttrState|verbs.QPAttrCurState)
	// An RTS->RTS with an allowed attribute, and a correct CUR_STATE, is accepted.
	stModify(t, q, verbs.QPAttr{QPState: verbs.QPSRTS, CurQPState: verbs.QPSRTS, MinRNRTimer: 3},
		verbs.QPAttrState|verbs.QPAttrCurState|verbs.QPAttrMinRNRTimer)
	if qa, _, _ := q.Query(); qa.MinRNRTimer != 3 || qa.DestQPNum != b.QP.Num() {
		t.Fatalf("after RTS->RTS: min_rnr_timer %d, dest_qp_num %#x; want 3, %#x", qa.MinRNRTimer, qa.DestQPNum, b.QP.Num())
	}
}

// ModifyValueChecks: attribute values beyond what the device or port
// supports are refused with ErrInvalid (ibv_modify_qp(3)): a port that does
// not exist, a P_Key index outside the table, a path MTU above the port's
// max_mtu, max_rd_atomic above max_qp_init_rd_atom, max_dest_rd_atomic
// above max_qp_rd_atom, retry counts above 7 and an RNR timer code above 31.
func testModifyValueChecks(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{NoConnect: true})
	q := a.QP
	da := a.Ctx.QueryDevice()
	port, err := a.Ctx.QueryPort(1)
	if err != nil {
		t.Fatalf("QueryPort: %v", err)
	}

	init, initM := stRCStep(t, f, verbs.QPSInit, b)
	for _, p := range []uint8{0, da.PhysPortCnt + 1} {
		bad := init
		bad.PortNum = p
		stRefuseModify(t, q, "RESET->INIT to a port that does not exist", bad, initM)
	}
	bad := init
	bad.PKeyIndex = port.PKeyTblLen
	stRefuseModify(t, q, "RESET->INIT with a P_Key index outside the table", bad, initM)
	stModify(t, q, init, initM)

	rtr, rtrM := stRCStep(t, f, verbs.QPSRTR, b)
	for _, m := range []verbs.MTU{port.MaxMTU + 1, 0} {
		bad := rtr
		bad.PathMTU = m
		stRefuseModify(t, q, "INIT->RTR with path MTU "+m.String(), bad, rtrM)
	}
	if da.MaxQPRdAtom < 255 {
		bad := rtr
		bad.MaxDestRdAtomic = uint8(da.MaxQPRdAtom + 1)
		stRefuseModify(t, q, "INIT->RTR with max_dest_rd_atomic above max_qp_rd_atom", bad, rtrM)
	}
	bad = rtr
	bad.MinRNRTimer = 32
	stRefuseModify(t, q, "INIT->RTR with min_rnr_timer 32", bad, rtrM)
	stModify(t, q, rtr, rtrM)

	rts, rtsM := stRCStep(t, f, verbs.QPSRTS, b)
	if da.MaxQPInitRdAtom < 255 {
		bad := rts
		bad.MaxRdAtomic = uint8(da.MaxQPInitRdAtom + 1)
		stRefuseModify(t, q, "RTR->RTS with max_rd_atomic above max_qp_init_rd_atom", bad, rtsM)
	}
	bad = rts
	bad.RNRRetry = 8
	stRefuseModify(t, q, "RTR->RTS with rnr_retry 8", bad, rtsM)
	bad = rts
	bad.RetryCnt = 8
	stRefuseModify(t, q, "RTR->RTS with retry_cnt 8", bad, rtsM)
	// The limits themselves are accepted.
	if da.MaxQPInitRdAtom < 256 {
		rts.MaxRdAtomic = uint8(da.MaxQPInitRdAtom)
	}
	stModify(t, q, rts, rtsM)
	if qa, _, _ := q.Query(); int(qa.MaxRdAtomic) != int(rts.MaxRdAtomic) {
		t.Fatalf("max_rd_atomic %d after Modify, want %d", qa.MaxRdAtomic, rts.MaxRdAtomic)
	}
}

// QueryReportsAttributes: ibv_query_qp returns the QP's current state and
// attributes (destination, access flags, read/atomic depths, capabilities
// at least as large as requested) and the attributes it was created with
// (its CQs, SRQ, type, sq_sig_all, user data).
func testQueryReportsAttributes(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	for _, s := range []struct{ q, peer *Side }{{a, b}, {b, a}} {
		attr, ia, err := s.q.QP.Query()
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		// dest_qp_num is set by INIT->RTR; a CM-connected (iWARP) QP need not report it.
		if attr.QPState != verbs.QPSRTS || (f.Caps().Modify && attr.DestQPNum != s.peer.QP.Num()) {
			t.Fatalf("Query: state %v, dest_qp_num %#x; want RTS, %#x", attr.QPState, attr.DestQPNum, s.peer.QP.Num())
		}
		if attr.QPAccessFlags != DefaultRC.QPAccessFlags || attr.MaxRdAtomic != DefaultRC.MaxRdAtomic ||
			attr.MaxDestRdAtomic != DefaultRC.MaxDestRdAtomic || (f.Caps().RNR && attr.RNRRetry != DefaultRC.RNRRetry) {
			t.Fatalf("Query: access %v, max_rd_atomic %d, max_dest_rd_atomic %d, rnr_retry %d; want %v, %d, %d, %d",
				attr.QPAccessFlags, attr.MaxRdAtomic, attr.MaxDestRdAtomic, attr.RNRRetry,
				DefaultRC.QPAccessFlags, DefaultRC.MaxRdAtomic, DefaultRC.MaxDestRdAtomic, DefaultRC.RNRRetry)
		}
		c := attr.Cap
		if c.MaxSendWR < 16 || c.MaxRecvWR < 16 || c.MaxSendSGE < 4 || c.MaxRecvSGE < 4 || c.MaxInlineData < 64 {
			t.Fatalf("Query: capabilities %+v, below the requested 16/16/4/4/64", c)
		}
		if ia.SendCQ != s.q.SendCQ || ia.RecvCQ != s.q.RecvCQ || ia.SRQ != nil || ia.QPType != verbs.QPTRC || ia.SQSigAll {
			t.Fatalf("Query: init attributes %+v do not match the creation", ia)
		}
		if ia.Cap != c {
			t.Fatalf("Query: init attr capabilities %+v differ from the QP's %+v", ia.Cap, c)
		}
	}

	// The creation attributes come back as given: user data, sq_sig_all, SRQ, shared CQ.
	srq, err := a.PD.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}})
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	t.Cleanup(func() { srq.Destroy() })
	type tag struct{ s string }
	ud := &tag{"mine"}
	q, err := a.PD.CreateQP(verbs.QPInitAttr{SendCQ: a.SendCQ, RecvCQ: a.SendCQ, SRQ: srq, QPType: verbs.QPTRC,
		SQSigAll: true, UserData: ud, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	defer q.Destroy()
	attr, ia, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if attr.QPState != verbs.QPSReset || ia.SendCQ != a.SendCQ || ia.RecvCQ != a.SendCQ || ia.SRQ != srq ||
		!ia.SQSigAll || ia.UserData != ud || q.UserData() != ud || q.SRQ() != srq || q.Type() != verbs.QPTRC {
		t.Fatalf("Query of a new QP: state %v, init attributes %+v", attr.QPState, ia)
	}
	if attr.Cap.MaxSendWR < 4 || attr.Cap.MaxSendSGE < 1 {
		t.Fatalf("Query: capabilities %+v, below the requested", attr.Cap)
	}
}

// AnyStateToErrAndReset: every state may move to ERR and to RESET
// (ibv_modify_qp(3), IB spec 10.3.1), ERR may move to ERR again, and a QP
// moved back to RESET can be brought up again. In ERR a receive posted
// completes at once with IBV_WC_WR_FLUSH_ERR.
func testAnyStateToErrAndReset(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{NoConnect: true})
	toErr := verbs.QPAttr{QPState: verbs.QPSErr}
	toReset := verbs.QPAttr{QPState: verbs.QPSReset}
	for _, st := range []verbs.QPState{verbs.QPSReset, verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD} {
		stDriveTo(t, f, a, b, st)
		stModify(t, a.QP, toErr, verbs.QPAttrState)
		if st >= verbs.QPSInit {
			a.MustPostRecv(t, a.Recv(uint64(st), 0, 64))
			ExpectWC(t, Poll1(t, a.RecvCQ), uint64(st), verbs.WCWRFlushErr, 0)
		}
		stModify(t, a.QP, toErr, verbs.QPAttrState)
		stModify(t, a.QP, verbs.QPAttr{QPState: verbs.QPSErr, CurQPState: verbs.QPSErr}, verbs.QPAttrState|verbs.QPAttrCurState)
		stModify(t, a.QP, toReset, verbs.QPAttrState)

		stDriveTo(t, f, a, b, st)
		stModify(t, a.QP, toReset, verbs.QPAttrState)
	}
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
	// After all that the QP still connects and works.
	stDriveTo(t, f, b, a, verbs.QPSRTS)
	stDriveTo(t, f, a, b, verbs.QPSRTS)
	b.MustPostRecv(t, b.Recv(100, 0, 64))
	a.MustPostSend(t, a.Send(1, 0, 64))
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, Poll1(t, b.RecvCQ), 100, verbs.WCSuccess, verbs.WCRecv)
}

// ResetDiscardsWorkWithoutCompletions: moving a QP to RESET discards its
// outstanding work requests without completions (ibv_modify_qp(3), IB spec
// 10.3.1 "Reset state"); in RESET nothing can be posted; after it is
// brought up again only new work completes.
func testResetDiscardsWorkWithoutCompletions(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	a.MustPostRecv(t, a.Recv(100, 0, 64), a.Recv(101, 64, 64), a.Recv(102, 128, 64))
	stalled := f.Caps().RNR // with rnr_retry 7, sends to a peer without receives stay outstanding
	if stalled {
		a.MustPostSend(t, a.Send(1, 0, 16), a.Send(2, 0, 16))
		ExpectEmpty(t, a.SendCQ)
	}
	stModify(t, a.QP, verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState)
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
	ExpectPostErr(t, a.QP.PostSend([]verbs.SendWR{a.Send(3, 0, 16)}), 0, verbs.ErrInvalidState)
	ExpectPostErr(t, a.QP.PostRecv([]verbs.RecvWR{a.Recv(103, 0, 64)}), 0, verbs.ErrInvalidState)

	stDriveTo(t, f, a, b, verbs.QPSRTS) // b is still in RTS, connected to a
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
	b.MustPostRecv(t, b.Recv(200, 0, 64))
	ExpectEmpty(t, b.RecvCQ) // the discarded sends are not delivered
	a.MustPostSend(t, a.Send(4, 0, 16))
	ExpectWC(t, Poll1(t, a.SendCQ), 4, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, Poll1(t, b.RecvCQ), 200, verbs.WCSuccess, verbs.WCRecv)
	// The discarded receives are gone too: b's message lands in a new one.
	a.MustPostRecv(t, a.Recv(300, 0, 64))
	b.MustPostSend(t, b.Send(5, 0, 8))
	ExpectWC(t, Poll1(t, b.SendCQ), 5, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, Poll1(t, a.RecvCQ), 300, verbs.WCSuccess, verbs.WCRecv)
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
}

// stNoAsyncEvent checks that ctx has no asynchronous event now. It waits a
// little, as events may be raised asynchronously; this tests absence, not speed.
func stNoAsyncEvent(t *testing.T, ctx *verbs.Context) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if ev, err := ctx.GetAsyncEvent(c); err == nil {
		t.Fatalf("unexpected async event %v", ev)
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetAsyncEvent: %v", err)
	}
}

// SQDDrainsAndRaisesEvent: RTS->SQD with en_sqd_async_notify stops the send
// queue after the requests already in progress; when they are done
// IBV_EVENT_SQ_DRAINED is raised, once (ibv_modify_qp(3), IB spec 10.3.1
// "SQ Drain state"). While draining, Query reports sq_draining. Requests
// posted in SQD are accepted but not executed until SQD->RTS.
func testSQDDrainsAndRaisesEvent(t *testing.T, f Fixture) {
	sqd := verbs.QPAttr{QPState: verbs.QPSSQD, EnSQDAsyncNotify: true}
	sqdM := verbs.QPAttrState | verbs.QPAttrEnSQDAsyncNotify
	rts := verbs.QPAttr{QPState: verbs.QPSRTS}

	t.Run("Idle", func(t *testing.T) {
		a, b := NewPair(t, f, PairOpts{})
		stModify(t, a.QP, sqd, sqdM)
		errExpectQPEvent(t, a, verbs.EventSQDrained)
		if qa, _, _ := a.QP.Query(); qa.SQDraining {
			t.Fatal("Query reports sq_draining after the drained event")
		}
		b.MustPostRecv(t, b.Recv(100, 0, 64))
		a.MustPostSend(t, a.Send(1, 0, 32))
		ExpectEmpty(t, a.SendCQ)
		ExpectEmpty(t, b.RecvCQ)
		stModify(t, a.QP, rts, verbs.QPAttrState)
		ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
		ExpectWC(t, Poll1(t, b.RecvCQ), 100, verbs.WCSuccess, verbs.WCRecv)
		stNoAsyncEvent(t, a.Ctx)
	})

	t.Run("WithoutNotify", func(t *testing.T) {
		a, _ := NewPair(t, f, PairOpts{})
		stModify(t, a.QP, verbs.QPAttr{QPState: verbs.QPSSQD}, verbs.QPAttrState)
		stNoAsyncEvent(t, a.Ctx)
		stModify(t, a.QP, rts, verbs.QPAttrState)
	})

	t.Run("InFlight", func(t *testing.T) {
		a, b := NewPair(t, f, PairOpts{}) // rnr_retry 7: the first send waits for a receive
		Fill(a.Buf[:64], 0x3c)
		a.MustPostSend(t, a.Send(1, 0, 32))
		stModify(t, a.QP, sqd, sqdM)
		if qa, _, _ := a.QP.Query(); !qa.SQDraining {
			t.Fatal("Query does not report sq_draining while a send is in progress")
		}
		stNoAsyncEvent(t, a.Ctx)
		a.MustPostSend(t, a.Send(2, 32, 32)) // posted in SQD: held back
		b.MustPostRecv(t, b.Recv(100, 0, 64), b.Recv(101, 64, 64))
		// The send in progress completes, then the queue is drained.
		ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
		ExpectWC(t, Poll1(t, b.RecvCQ), 100, verbs.WCSuccess, verbs.WCRecv)
		errExpectQPEvent(t, a, verbs.EventSQDrained)
		if qa, _, _ := a.QP.Query(); qa.SQDraining || qa.QPState != verbs.QPSSQD {
			t.Fatalf("after draining: state %v, sq_draining %v; want SQD, false", qa.QPState, qa.SQDraining)
		}
		ExpectEmpty(t, a.SendCQ)
		ExpectEmpty(t, b.RecvCQ)
		stModify(t, a.QP, rts, verbs.QPAttrState)
		ExpectWC(t, Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
		wc := Poll1(t, b.RecvCQ)
		ExpectWC(t, wc, 101, verbs.WCSuccess, verbs.WCRecv)
		if wc.ByteLen != 32 || string(b.Buf[64:96]) != string(a.Buf[32:64]) {
			t.Fatalf("second message %s differs", Describe(wc))
		}
		stNoAsyncEvent(t, a.Ctx) // the drained event came once
	})
}

// DestroyedQPRejectsPosts: a destroyed QP accepts nothing more (ErrClosed
// for posts and Modify; a second Destroy is nil, goverbs' rule for every
// second Destroy), and destroying it discards its outstanding work
// without completions (ibv_destroy_qp(3)).
func testDestroyedQPRejectsPosts(t *testing.T, f Fixture) {
	a, _ := NewPair(t, f, PairOpts{})
	a.MustPostRecv(t, a.Recv(100, 0, 64))
	q := a.QP
	if err := q.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	a.QP = nil
	ExpectPostErr(t, q.PostSend([]verbs.SendWR{a.Send(1, 0, 8)}), 0, verbs.ErrClosed)
	ExpectPostErr(t, q.PostRecv([]verbs.RecvWR{a.Recv(101, 0, 8)}), 0, verbs.ErrClosed)
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Modify of a destroyed QP: %v, want ErrClosed", err)
	}
	if err := q.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v, want nil", err)
	}
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
}

// DestroyResourcesChildrenFirst: an object cannot be destroyed while others
// use it (ErrBusy): a PD with regions, QPs, SRQs or address handles
// (ibv_dealloc_pd(3)), a CQ used by a QP (ibv_destroy_cq(3)), an SRQ a QP is
// attached to (ibv_destroy_srq(3)), a completion channel with CQs
// (ibv_destroy_comp_channel(3)). Destroyed children first, each succeeds;
// destroying anything a second time returns nil (goverbs' rule: the object
// is gone either way), and does not free anything twice.
func testDestroyResourcesChildrenFirst(t *testing.T, f Fixture) {
	ctx, _ := f.Open(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatalf("CreateCompChannel: %v", err)
	}
	cq, err := ctx.CreateCQ(16, ch)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}})
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	var ah *verbs.AH // address handles are for UD
	if f.Caps().UD {
		if ah, err = pd.CreateAH(f.AHTo(t, ctx)); err != nil {
			t.Fatalf("CreateAH: %v", err)
		}
	}
	t.Cleanup(func() { // if the test fails midway
		qp.Destroy()
		mr.Dereg()
		if ah != nil {
			ah.Destroy()
		}
		srq.Destroy()
		cq.Destroy()
		ch.Close()
		pd.Dealloc()
	})
	busy := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("%s: %v, want ErrBusy", what, err)
		}
	}
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	busy("Dealloc of a PD with an MR, a QP, an SRQ and an AH", pd.Dealloc())
	busy("Destroy of a CQ a QP uses", cq.Destroy())
	busy("Destroy of an SRQ a QP is attached to", srq.Destroy())
	busy("Close of a channel a CQ uses", ch.Close())
	ok("Dereg", mr.Dereg())
	busy("Dealloc of a PD with a QP, an SRQ and an AH", pd.Dealloc())
	ok("QP Destroy", qp.Destroy())
	busy("Dealloc of a PD with an SRQ and an AH", pd.Dealloc())
	ok("SRQ Destroy", srq.Destroy())
	ok("CQ Destroy", cq.Destroy())
	ok("channel Close", ch.Close())
	if ah != nil {
		busy("Dealloc of a PD with an AH", pd.Dealloc())
		ok("AH Destroy", ah.Destroy())
	}
	ok("PD Dealloc", pd.Dealloc())

	closed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("second %s: %v, want nil", what, err)
		}
	}
	closed("Dereg", mr.Dereg())
	closed("QP Destroy", qp.Destroy())
	closed("SRQ Destroy", srq.Destroy())
	closed("CQ Destroy", cq.Destroy())
	closed("channel Close", ch.Close())
	if ah != nil {
		closed("AH Destroy", ah.Destroy())
	}
	closed("PD Dealloc", pd.Dealloc())
}

// RegMRAccessRules: ibv_reg_mr(3) refuses remote write or remote atomic
// access without local write, and an empty buffer (ErrInvalid); every region
// gets its own keys, even for the same memory; Addr is the address of the
// region's first byte, and SGE, RemoteAddr, Len, Bytes and Access agree
// with it.
func testRegMRAccessRules(t *testing.T, f Fixture) {
	ctx, _ := f.Open(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	var mrs []*verbs.MR
	t.Cleanup(func() {
		for _, mr := range mrs {
			mr.Dereg()
		}
		pd.Dealloc()
	})
	buf := make([]byte, 8192)
	for _, acc := range []verbs.AccessFlags{
		verbs.AccessRemoteWrite,
		verbs.AccessRemoteAtomic,
		verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		verbs.AccessRemoteAtomic | verbs.AccessRemoteRead,
	} {
		if mr, err := pd.RegMR(buf, acc); !errors.Is(err, verbs.ErrInvalid) {
			if mr != nil {
				mrs = append(mrs, mr)
			}
			t.Errorf("RegMR(%v) without LOCAL_WRITE: %v, want ErrInvalid", acc, err)
		}
	}
	for _, b := range [][]byte{nil, {}, buf[:0]} {
		if mr, err := pd.RegMR(b, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrInvalid) {
			if mr != nil {
				mrs = append(mrs, mr)
			}
			t.Errorf("RegMR of an empty buffer: %v, want ErrInvalid", err)
		}
	}
	reg := func(b []byte, acc verbs.AccessFlags) *verbs.MR {
		t.Helper()
		mr, err := pd.RegMR(b, acc)
		if err != nil {
			t.Fatalf("RegMR(%v): %v", acc, err)
		}
		mrs = append(mrs, mr)
		return mr
	}
	full := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	m1 := reg(buf, full)
	m2 := reg(make([]byte, 100), 0)                 // no access at all is a valid registration
	m3 := reg(buf, verbs.AccessRemoteRead)          // remote read needs no local write
	m4 := reg(buf[100:300], verbs.AccessLocalWrite) // a part of the same memory
	for i, x := range []*verbs.MR{m1, m2, m3, m4} {
		for _, y := range []*verbs.MR{m1, m2, m3, m4}[i+1:] {
			// An rkey names something only with remote access: a device
			// may give every local-only region the same one (rxe: 0).
			remote := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
			sameR := x.RKey() == y.RKey() && x.Access()&remote != 0 && y.Access()&remote != 0
			if x.LKey() == y.LKey() || sameR {
				t.Errorf("two regions share a key: lkeys %#x %#x, rkeys %#x %#x", x.LKey(), y.LKey(), x.RKey(), y.RKey())
			}
		}
	}
	if m1.Len() != len(buf) || &m1.Bytes()[0] != &buf[0] || m1.Access() != full || m1.PD() != pd {
		t.Errorf("region: len %d, access %v; want %d, %v, the registered memory and its PD", m1.Len(), m1.Access(), len(buf), full)
	}
	if got, want := m1.SGE(10, 20), (verbs.SGE{Addr: m1.Addr() + 10, Length: 20, LKey: m1.LKey()}); got != want {
		t.Errorf("SGE(10, 20) = %+v, want %+v", got, want)
	}
	if m1.RemoteAddr(10) != m1.Addr()+10 {
		t.Errorf("RemoteAddr(10) = %#x, want Addr+10 = %#x", m1.RemoteAddr(10), m1.Addr()+10)
	}
	if m4.Addr() != m1.Addr()+100 || m4.Len() != 200 || m3.Addr() != m1.Addr() {
		t.Errorf("Addr of buf[100:] is %#x, of buf %#x: want the byte addresses (%#x + 100)", m4.Addr(), m3.Addr(), m1.Addr())
	}
	if m1.Addr() == 0 {
		t.Error("Addr is 0")
	}
	for _, mr := range mrs {
		if err := mr.Dereg(); err != nil {
			t.Errorf("Dereg: %v", err)
		}
		if err := mr.Dereg(); err != nil {
			t.Errorf("second Dereg: %v, want nil", err)
		}
	}
	mrs = nil
	if err := pd.Dealloc(); err != nil {
		t.Errorf("Dealloc after every region was deregistered: %v", err)
	}
}

// DeviceAttributesAndPort: ibv_query_device reports positive limits and a
// node GUID and type that agree with the device; ibv_query_port of port 1
// (ports are numbered from 1) reports an active port with a valid MTU;
// ports 0 and phys_port_cnt+1 do not exist (ErrInvalid); ibv_query_gid
// returns entry 0 and refuses an index outside the table.
func testDeviceAttributesAndPort(t *testing.T, f Fixture) {
	ctx, _ := f.Open(t)
	da := ctx.QueryDevice()
	for name, v := range map[string]int{
		"max_qp": da.MaxQP, "max_qp_wr": da.MaxQPWR, "max_sge": da.MaxSGE, "max_sge_rd": da.MaxSGERd, "max_cq": da.MaxCQ,
		"max_cqe": da.MaxCQE, "max_mr": da.MaxMR, "max_pd": da.MaxPD, "max_qp_rd_atom": da.MaxQPRdAtom,
		"max_qp_init_rd_atom": da.MaxQPInitRdAtom, "max_srq": da.MaxSRQ, "max_srq_wr": da.MaxSRQWR,
		"max_srq_sge": da.MaxSRQSGE, "max_pkeys": da.MaxPKeys, "phys_port_cnt": int(da.PhysPortCnt),
	} {
		if v <= 0 {
			t.Errorf("device attribute %s is %d, want > 0", name, v)
		}
	}
	if da.MaxMRSize == 0 {
		t.Error("max_mr_size is 0")
	}
	dev := ctx.Device()
	if dev.Name() == "" || da.NodeGUID == 0 || da.NodeGUID != dev.GUID() || da.NodeType != dev.NodeType() || da.TransportType != dev.TransportType() {
		t.Errorf("device %q: attributes guid %#x type %v/%v, device guid %#x type %v/%v",
			dev.Name(), da.NodeGUID, da.NodeType, da.TransportType, dev.GUID(), dev.NodeType(), dev.TransportType())
	}

	pa, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatalf("QueryPort(1): %v", err)
	}
	if pa.State != verbs.PortActive || pa.MaxMTU.Bytes() == 0 || pa.ActiveMTU.Bytes() == 0 || pa.ActiveMTU > pa.MaxMTU ||
		pa.GIDTblLen < 1 || pa.PKeyTblLen < 1 || pa.MaxMsgSz == 0 {
		t.Errorf("port 1: %+v; want active, with valid MTUs and tables", pa)
	}
	for _, p := range []uint8{0, da.PhysPortCnt + 1} {
		if _, err := ctx.QueryPort(p); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("QueryPort(%d): %v, want ErrInvalid", p, err)
		}
	}
	if _, err := ctx.QueryGID(1, 0); err != nil {
		t.Fatalf("QueryGID(1, 0): %v", err)
	}
	if _, err := ctx.QueryGID(1, pa.GIDTblLen); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("QueryGID(1, %d) past the table: %v, want ErrInvalid", pa.GIDTblLen, err)
	}
	if _, err := ctx.QueryGID(da.PhysPortCnt+1, 0); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("QueryGID of port %d: %v, want ErrInvalid", da.PhysPortCnt+1, err)
	}
}

// CreateQPCapsChecked: ibv_create_qp(3) refuses capabilities beyond the
// device's limits (max_qp_wr, max_sge, the inline limit), a missing CQ and a CQ of another context (ErrInvalid); ibv_create_srq(3)
// likewise refuses more than max_srq_wr. A QP type the provider does not
// implement fails with ErrNotSupported, never with another error.
func testCreateQPCapsChecked(t *testing.T, f Fixture) {
	ctx, ctx2 := f.Open(t)
	s := NewSide(t, ctx, verbs.QPTRC, PairOpts{})
	cq2, err := ctx2.CreateCQ(4, nil)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	t.Cleanup(func() { cq2.Destroy() })
	da := ctx.QueryDevice()
	base := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	create := func(ia verbs.QPInitAttr) (*verbs.QP, error) {
		q, err := s.PD.CreateQP(ia)
		if err == nil {
			t.Cleanup(func() { q.Destroy() })
		}
		return q, err
	}
	withCap := func(mod func(c *verbs.QPCap)) verbs.QPInitAttr {
		c := base
		mod(&c)
		return verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, QPType: verbs.QPTRC, Cap: c}
	}
	for name, ia := range map[string]verbs.QPInitAttr{
		"max_send_wr above max_qp_wr":   withCap(func(c *verbs.QPCap) { c.MaxSendWR = da.MaxQPWR + 1 }),
		"max_recv_wr above max_qp_wr":   withCap(func(c *verbs.QPCap) { c.MaxRecvWR = da.MaxQPWR + 1 }),
		"max_send_sge above max_sge":    withCap(func(c *verbs.QPCap) { c.MaxSendSGE = da.MaxSGE + 1 }),
		"max_recv_sge above max_sge":    withCap(func(c *verbs.QPCap) { c.MaxRecvSGE = da.MaxSGE + 1 }),
		"max_inline_data above limit":   withCap(func(c *verbs.QPCap) { c.MaxInlineData = da.MaxInlineData + 1 }),
		"no send CQ":                    {RecvCQ: s.RecvCQ, QPType: verbs.QPTRC, Cap: base},
		"no receive CQ":                 {SendCQ: s.SendCQ, QPType: verbs.QPTRC, Cap: base},
		"send CQ of another context":    {SendCQ: cq2, RecvCQ: s.RecvCQ, QPType: verbs.QPTRC, Cap: base},
		"receive CQ of another context": {SendCQ: s.SendCQ, RecvCQ: cq2, QPType: verbs.QPTRC, Cap: base},
	} {
		if _, err := create(ia); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("CreateQP with %s: %v, want ErrInvalid", name, err)
		}
	}
	if srq, err := s.PD.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: da.MaxSRQWR + 1, MaxSGE: 1}}); !errors.Is(err, verbs.ErrInvalid) {
		if srq != nil {
			srq.Destroy()
		}
		t.Errorf("CreateSRQ above max_srq_wr: %v, want ErrInvalid", err)
	}
	for _, typ := range []verbs.QPType{verbs.QPTUC, verbs.QPTRawPacket} {
		_, err := create(verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, QPType: typ, Cap: base})
		if err != nil && !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("CreateQP of type %v: %v, want success or ErrNotSupported", typ, err)
		}
	}
	// Within the limits creation succeeds and the QP has at least what was asked.
	q, err := create(withCap(func(c *verbs.QPCap) { c.MaxInlineData = min(da.MaxInlineData, 32) }))
	if err != nil {
		t.Fatalf("CreateQP within the limits: %v", err)
	}
	qa, _, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if c := qa.Cap; c.MaxSendWR < base.MaxSendWR || c.MaxRecvWR < base.MaxRecvWR || c.MaxSendSGE < 1 || c.MaxRecvSGE < 1 ||
		c.MaxInlineData < min(da.MaxInlineData, 32) || qa.QPState != verbs.QPSReset {
		t.Fatalf("new QP: state %v, capabilities %+v; want RESET and at least %+v", qa.QPState, c, base)
	}
}

// CreateQPZeroValueDefaults: goverbs' rule for zero values. A QPInitAttr
// with nothing but its CQs makes an RC QP with 16 work requests and 1
// scatter/gather element each way (at least: a provider may round up);
// a negative capability asks for none.
func testCreateQPZeroValueDefaults(t *testing.T, f Fixture) {
	ctx, _ := f.Open(t)
	s := NewSide(t, ctx, verbs.QPTRC, PairOpts{})
	q, err := s.PD.CreateQP(verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ})
	if err != nil {
		t.Fatalf("CreateQP of a zero QPInitAttr: %v", err)
	}
	t.Cleanup(func() { q.Destroy() })
	if q.Type() != verbs.QPTRC {
		t.Errorf("QP type %v, want RC", q.Type())
	}
	_, ia, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if c := ia.Cap; c.MaxSendWR < 16 || c.MaxRecvWR < 16 || c.MaxSendSGE < 1 || c.MaxRecvSGE < 1 {
		t.Errorf("capabilities of a zero QPCap: %+v, want at least 16 WRs and 1 SGE each way", c)
	}
	if ia.QPType != verbs.QPTRC {
		t.Errorf("queried QP type %v, want RC", ia.QPType)
	}
	q2, err := s.PD.CreateQP(verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, Cap: verbs.QPCap{MaxSendSGE: -1}})
	if err != nil {
		t.Fatalf("CreateQP with MaxSendSGE -1: %v", err)
	}
	t.Cleanup(func() { q2.Destroy() })
	if _, ia, err := q2.Query(); err != nil || ia.Cap.MaxSendWR < 16 {
		t.Errorf("Query of a QP asking for no send SGE: %+v, %v", ia.Cap, err)
	}
}
