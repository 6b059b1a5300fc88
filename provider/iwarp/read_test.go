package iwarp_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// Back-to-back 64 KiB RDMA reads with IRD = ORD = 1: a response may
// arrive before the requester's Transmit returns, and the next request may
// arrive before the responder's write of the previous response returns.
func TestReadsBackToBack(t *testing.T) {
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: 1 << 20})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: 1 << 20})
	ca, cb := connect(t, a.QP, b.QP, iwarp.Params{IRD: 1, ORD: 1}, iwarp.Params{IRD: 1, ORD: 1})
	for i := range 200 {
		a.MustPostSend(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 65536)},
			RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
		wc := conformance.Poll1(t, a.SendCQ)
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("%d: %v %v %v (%s)", i, wc.Status, ca.Err(), cb.Err(), iwarp.DebugState(a.QP))
		}
	}
}
