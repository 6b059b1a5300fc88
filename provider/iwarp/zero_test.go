package iwarp_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// Zero Params (and a nil *Config) are the defaults: the most reads each
// way, so an RDMA READ succeeds; negative values ask for none (and MPA's
// negotiation leaves them none only when both sides ask so).
func TestZeroParams(t *testing.T) {
	leakcheck.Check(t)
	for _, c := range []struct {
		name string
		ird  int
		ok   bool
	}{{"zero", 0, true}, {"negative", -1, false}} {
		p := iwarp.Params{IRD: c.ird, ORD: c.ird}
		a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
		b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
		ca, cb := connect(t, a.QP, b.QP, p, p)
		if (ca.ORD() == 0) != !c.ok || (cb.IRD() == 0) != !c.ok {
			t.Errorf("%s: dialer ORD %d, responder IRD %d", c.name, ca.ORD(), cb.IRD())
		}
		if !c.ok {
			continue
		}
		a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)},
			RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
		if wc := conformance.Poll1(t, a.SendCQ); wc.Status != verbs.WCSuccess {
			t.Errorf("%s: READ with zero Params: %v", c.name, wc.Status)
		}
	}
}
