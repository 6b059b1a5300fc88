package loop

import (
	"github.com/goverbs/goverbs/internal/errfmt"
	"github.com/goverbs/goverbs/internal/udqp"
	"github.com/goverbs/goverbs/verbs"
)

// DefaultRC holds the RC attributes Connect uses: all remote access, 16
// outstanding reads/atomics each way, a 4096-byte path MTU, the shortest RNR
// timer (10 µs) and infinite RNR retries.
var DefaultRC = verbs.QPAttr{
	QPAccessFlags:   verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
	PathMTU:         verbs.MTU4096,
	MaxRdAtomic:     16,
	MaxDestRdAtomic: 16,
	MinRNRTimer:     1,
	Timeout:         14,
	RetryCnt:        7,
	RNRRetry:        7,
}

// Connect moves two RC QPs from RESET to RTS, each the other's destination,
// with the attributes of DefaultRC. The QPs may be on one loop device or on
// two.
func Connect(a, b *verbs.QP) error { return ConnectAttr(a, b, DefaultRC) }

// ConnectAttr is Connect with the RC attributes taken from attr
// (QPAccessFlags, PathMTU, MaxRdAtomic, MaxDestRdAtomic, MinRNRTimer,
// Timeout, RetryCnt, RNRRetry), the same for both QPs.
func ConnectAttr(a, b *verbs.QP, attr verbs.QPAttr) error {
	if err := toRTR(a, b, attr); err != nil {
		return err
	}
	if a != b {
		if err := toRTR(b, a, attr); err != nil {
			return err
		}
	}
	for _, q := range []*verbs.QP{a, b} {
		if q == b && a == b {
			break
		}
		rts := attr
		rts.QPState = verbs.QPSRTS
		mask := verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		if err := q.Modify(&rts, mask); err != nil {
			return errfmt.Wrap(err, "loop: QP %#x to RTS", q.Num())
		}
	}
	return nil
}

func toRTR(q, dest *verbs.QP, attr verbs.QPAttr) error {
	port, err := dest.PD().Context().QueryPort(1)
	if err != nil {
		return err
	}
	gid, err := dest.PD().Context().QueryGID(1, 0)
	if err != nil {
		return err
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: attr.QPAccessFlags}
	if err := q.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return errfmt.Wrap(err, "loop: QP %#x to INIT", q.Num())
	}
	rtr := attr
	rtr.QPState = verbs.QPSRTR
	rtr.DestQPNum = dest.Num()
	rtr.AHAttr = verbs.AHAttr{DLID: port.LID, PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
		verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	if err := q.Modify(&rtr, mask); err != nil {
		return errfmt.Wrap(err, "loop: QP %#x to RTR", q.Num())
	}
	return nil
}

// ActivateUD moves a UD QP from RESET to RTS with Q_Key qkey.
func ActivateUD(q *verbs.QP, qkey uint32) error {
	if err := udqp.Activate(q, qkey); err != nil {
		return errfmt.Wrap(err, "loop")
	}
	return nil
}

// AHTo returns the address vector that reaches port 1 of ctx's device, for
// CreateAH and UD sends.
func AHTo(ctx *verbs.Context) (verbs.AHAttr, error) {
	port, err := ctx.QueryPort(1)
	if err != nil {
		return verbs.AHAttr{}, err
	}
	gid, err := ctx.QueryGID(1, 0)
	if err != nil {
		return verbs.AHAttr{}, err
	}
	return verbs.AHAttr{DLID: port.LID, PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}, nil
}
