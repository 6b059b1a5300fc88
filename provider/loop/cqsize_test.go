package loop_test

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/verbs"
)

// A CQ created for one entry overflows (it used to let completions overwrite
// each other and Poll spin).
func TestCQOfOneEntryOverflows(t *testing.T) {
	ctx, err := verbs.OpenDevice("loop0")
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	a := conformance.NewSide(t, ctx, verbs.QPTRC, conformance.PairOpts{CQE: 1, NoConnect: true})
	b := conformance.NewSide(t, ctx, verbs.QPTRC, conformance.PairOpts{})
	if err := (fixture{}).Connect(t, a.QP, b.QP, conformance.DefaultRC); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		a.MustPostSend(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	}
	wc := make([]verbs.WC, 8)
	got := 0
	for range 10 {
		n, err := a.SendCQ.Poll(wc)
		for i := range n {
			if wc[i].WRID != uint64(got+i) {
				t.Fatalf("completion %d has wr_id %d", got+i, wc[i].WRID)
			}
		}
		got += n
		if errors.Is(err, verbs.ErrCQOverflow) {
			if got > a.SendCQ.CQE() {
				t.Fatalf("%d completions from a CQ of %d", got, a.SendCQ.CQE())
			}
			return
		}
	}
	t.Fatalf("no overflow after %d completions (CQE %d)", got, a.SendCQ.CQE())
}
