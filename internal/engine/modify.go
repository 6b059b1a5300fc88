package engine

import (
	"fmt"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The transitions of the InfiniBand QP state machine for the QP types the
// engine has, with the attributes each requires and allows (IBA 11.2.4.2;
// the same table as the kernel's ib_modify_qp_is_ok).
type transition struct {
	req, opt [2]verbs.QPAttrMask // [RC, UD]
}

const (
	mPKey    = verbs.QPAttrPKeyIndex
	mPort    = verbs.QPAttrPort
	mAccess  = verbs.QPAttrAccessFlags
	mQKey    = verbs.QPAttrQKey
	mCur     = verbs.QPAttrCurState
	mAlt     = verbs.QPAttrAltPath
	mMig     = verbs.QPAttrPathMigState
	mRnrT    = verbs.QPAttrMinRnrTimer
	rtsOptRC = mCur | mAccess | mAlt | mMig | mRnrT
	rtsOptUD = mCur | mQKey
)

var transitions = map[[2]verbs.QPState]transition{
	{verbs.QPSReset, verbs.QPSReset}: {},
	{verbs.QPSReset, verbs.QPSInit}:  {req: [2]verbs.QPAttrMask{mPKey | mPort | mAccess, mPKey | mPort | mQKey}},
	{verbs.QPSInit, verbs.QPSInit}:   {opt: [2]verbs.QPAttrMask{mPKey | mPort | mAccess, mPKey | mPort | mQKey}},
	{verbs.QPSInit, verbs.QPSRTR}: {
		req: [2]verbs.QPAttrMask{verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | mRnrT, 0},
		opt: [2]verbs.QPAttrMask{mAlt | mAccess | mPKey, mPKey | mQKey},
	},
	{verbs.QPSRTR, verbs.QPSRTS}: {
		req: [2]verbs.QPAttrMask{verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRnrRetry | verbs.QPAttrMaxQPRdAtomic, verbs.QPAttrSQPSN},
		opt: [2]verbs.QPAttrMask{rtsOptRC, rtsOptUD},
	},
	{verbs.QPSRTS, verbs.QPSRTS}: {opt: [2]verbs.QPAttrMask{rtsOptRC, rtsOptUD}},
	{verbs.QPSRTS, verbs.QPSSQD}: {opt: [2]verbs.QPAttrMask{verbs.QPAttrEnSQDAsyncNotify, verbs.QPAttrEnSQDAsyncNotify}},
	{verbs.QPSSQD, verbs.QPSRTS}: {opt: [2]verbs.QPAttrMask{rtsOptRC, rtsOptUD}},
	{verbs.QPSSQD, verbs.QPSSQD}: {opt: [2]verbs.QPAttrMask{
		verbs.QPAttrAV | mAlt | mAccess | mPKey | mRnrT | mMig | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRnrRetry | verbs.QPAttrMaxQPRdAtomic | verbs.QPAttrMaxDestRdAtomic | mPort,
		mPKey | mQKey}},
	{verbs.QPSSQE, verbs.QPSRTS}: {opt: [2]verbs.QPAttrMask{0, mCur | mQKey}},
}

func typeIndex(t verbs.QPType) int {
	if t == verbs.QPTUD {
		return 1
	}
	return 0
}

// checkModify validates a Modify against the state machine and the
// device's limits; q.mu is held.
func (q *QP) checkModify(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	from := q.state
	to := from
	if mask&verbs.QPAttrState != 0 {
		to = a.QPState
	}
	if mask&verbs.QPAttrCurState != 0 && a.CurQPState != from {
		return fmt.Errorf("%w: current state given as %v, the QP is in %v", verbs.ErrInvalid, a.CurQPState, from)
	}
	allowed := verbs.QPAttrState
	var req verbs.QPAttrMask
	switch {
	case to == verbs.QPSReset || to == verbs.QPSErr:
		allowed |= mCur
	default:
		t, ok := transitions[[2]verbs.QPState{from, to}]
		if !ok {
			return fmt.Errorf("%w: no transition from %v to %v", verbs.ErrInvalid, from, to)
		}
		ti := typeIndex(q.typ)
		req = t.req[ti]
		allowed |= t.req[ti] | t.opt[ti]
	}
	if extra := mask &^ allowed; extra != 0 {
		return fmt.Errorf("%w: attributes %v not allowed on %v %v->%v", verbs.ErrInvalid, extra, q.typ, from, to)
	}
	if missing := req &^ mask; missing != 0 {
		return fmt.Errorf("%w: %v %v->%v requires %v", verbs.ErrInvalid, q.typ, from, to, missing)
	}
	dev := &q.dev.cfg
	if mask&verbs.QPAttrPort != 0 && a.PortNum != 1 {
		return fmt.Errorf("%w: port %d (the device has port 1)", verbs.ErrInvalid, a.PortNum)
	}
	if mask&verbs.QPAttrPKeyIndex != 0 && int(a.PKeyIndex) >= max(dev.Attr.MaxPKeys, 1) {
		return fmt.Errorf("%w: P_Key index %d", verbs.ErrInvalid, a.PKeyIndex)
	}
	if mask&verbs.QPAttrPathMTU != 0 && (a.PathMTU < verbs.MTU256 || a.PathMTU > dev.Port.MaxMTU) {
		return fmt.Errorf("%w: path MTU %v (the port allows up to %v)", verbs.ErrInvalid, a.PathMTU, dev.Port.MaxMTU)
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > dev.Attr.MaxQPInitRdAtom {
		return fmt.Errorf("%w: max_rd_atomic %d exceeds the device's %d", verbs.ErrInvalid, a.MaxRdAtomic, dev.Attr.MaxQPInitRdAtom)
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > dev.Attr.MaxQPRdAtom {
		return fmt.Errorf("%w: max_dest_rd_atomic %d exceeds the device's %d", verbs.ErrInvalid, a.MaxDestRdAtomic, dev.Attr.MaxQPRdAtom)
	}
	if mask&verbs.QPAttrAccessFlags != 0 && a.QPAccessFlags&^(verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessLocalWrite) != 0 {
		return fmt.Errorf("%w: QP access flags %v", verbs.ErrInvalid, a.QPAccessFlags)
	}
	if mask&(verbs.QPAttrRetryCnt|verbs.QPAttrRnrRetry) != 0 && (a.RetryCnt > 7 || a.RnrRetry > 7) {
		return fmt.Errorf("%w: retry counts are 3 bits (retry_cnt %d, rnr_retry %d)", verbs.ErrInvalid, a.RetryCnt, a.RnrRetry)
	}
	if mask&verbs.QPAttrMinRnrTimer != 0 && a.MinRnrTimer > 31 {
		return fmt.Errorf("%w: min_rnr_timer %d (5 bits)", verbs.ErrInvalid, a.MinRnrTimer)
	}
	if mask&verbs.QPAttrDestQPN != 0 && a.DestQPNum > 0xFFFFFF {
		return fmt.Errorf("%w: destination QP number %#x (24 bits)", verbs.ErrInvalid, a.DestQPNum)
	}
	return nil
}

// rnrMicros is the IBA table of min_rnr_timer codes, in microseconds.
var rnrMicros = [32]int{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}

// RNRDelay returns the delay a min_rnr_timer code stands for (IBA table).
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrMicros[code&31]) * time.Microsecond
}
