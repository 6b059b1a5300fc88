package roce_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// testAddrs are two loopback addresses of this test process's own (a
// port 4791 per address, so concurrent test processes use others).
var testAddrs = func() [2]netip.Addr {
	p := os.Getpid()
	b := byte(16 + p%200)
	c := byte(p / 200 % 250)
	return [2]netip.Addr{netip.AddrFrom4([4]byte{127, b, c, 1}), netip.AddrFrom4([4]byte{127, b, c, 2})}
}()

// devices returns the names of the two test devices.
func devices(t testing.TB) (a, b string) {
	t.Helper()
	var err error
	if a, err = roce.AddDevice(testAddrs[0]); err != nil {
		t.Fatal(err)
	}
	if b, err = roce.AddDevice(testAddrs[1]); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func openDev(t testing.TB, name string) *verbs.Context {
	t.Helper()
	ctx, err := verbs.OpenDevice(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// fixture runs the provider-independent suite over RoCEv2 on loopback:
// the two ends of every connection on two devices (two addresses), the
// packets through the kernel's UDP stack.
type fixture struct{}

func (fixture) Caps() conformance.Caps {
	return conformance.Caps{UD: true, RNR: true, Atomics: true, Flush: true, Immediate: true, Invalidate: true, MemoryWindows: true, Rereg: true, ResizeCQ: true, Modify: true}
}

func (fixture) Open(t testing.TB) (a, b *verbs.Context) {
	da, db := devices(t)
	return openDev(t, da), openDev(t, db)
}

func (fixture) Connect(t testing.TB, a, b *verbs.QP, attr verbs.QPAttr) error {
	if err := toRTR(t, a, b, attr); err != nil {
		return err
	}
	if err := toRTR(t, b, a, attr); err != nil {
		return err
	}
	for _, q := range []*verbs.QP{a, b} {
		rts := attr
		rts.QPState = verbs.QPSRTS
		rts.SQPSN = sqPSN(q)
		mask := verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		if err := q.Modify(&rts, mask); err != nil {
			return fmt.Errorf("QP %#x to RTS: %w", q.Num(), err)
		}
	}
	return nil
}

// sqPSN is a QP's starting PSN: 0, as the suite's own hand-made moves to
// RTR and RTS (DefaultRC) give it. (TestPSNWrap starts near the wrap.)
func sqPSN(q *verbs.QP) uint32 { return 0 }

func toRTR(t testing.TB, q, dest *verbs.QP, attr verbs.QPAttr) error {
	gid, err := dest.PD().Context().QueryGID(1, 0)
	if err != nil {
		return err
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: attr.QPAccessFlags}
	if err := q.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("QP %#x to INIT: %w", q.Num(), err)
	}
	rtr := attr
	rtr.QPState = verbs.QPSRTR
	rtr.DestQPNum = dest.Num()
	rtr.RQPSN = sqPSN(dest)
	rtr.AHAttr = verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
		verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	if err := q.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("QP %#x to RTR: %w", q.Num(), err)
	}
	return nil
}

func (fixture) ActivateUD(t testing.TB, q *verbs.QP, qkey uint32) error {
	return conformance.ActivateUD(q, qkey)
}

func (fixture) AHTo(t testing.TB, ctx *verbs.Context) verbs.AHAttr {
	t.Helper()
	gid, err := ctx.QueryGID(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}
}

func TestConformance(t *testing.T) { conformance.Run(t, fixture{}) }
