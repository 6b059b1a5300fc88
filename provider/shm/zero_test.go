package shm_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// Zero Params (and a nil *Config) are the defaults: the most reads each
// way, and a SEND that finds no receive is retried for ever (rnr_retry 7)
// rather than failing; negative values ask for none.
func TestZeroParams(t *testing.T) {
	leakcheck.Check(t)
	a, b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{}), conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	connect(t, a.QP, b.QP, shm.Params{}, shm.Params{})
	a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)},
		RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMARead)
	a.MustPostSend(t, a.Send(2, 0, 8)) // no receive posted yet: RNR, retried
	b.MustPostRecv(t, b.Recv(3, 0, 64))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 3, verbs.WCSuccess, verbs.WCRecv)

	c, d := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{}), conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	none := shm.Params{IRD: -1, ORD: -1, RNRRetry: -1}
	connect(t, c.QP, d.QP, none, none)
	c.MustPostSend(t, c.Send(4, 0, 8)) // no receive, no RNR retry: fails
	if wc := conformance.Poll1(t, c.SendCQ); wc.Status != verbs.WCRNRRetryExcErr {
		t.Errorf("a SEND without a receive and rnr_retry none: %v, want RNR_RETRY_EXC_ERR", wc.Status)
	}
}
