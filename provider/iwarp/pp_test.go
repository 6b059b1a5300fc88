package iwarp_test

import (
	"sync"
	"testing"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/verbs"
)

func TestPingPongPolled(t *testing.T) {
	o := conformance.PairOpts{BufSize: 4096, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, CQE: 1024}
	x := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	y := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	cx, cy := connect(t, x.QP, y.QP, cm.Params{IRD: 16, ORD: 16}, cm.Params{IRD: 16, ORD: 16})
	const n = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	var echoErr error
	// The echo side's first receive is posted before anything is sent:
	// iWARP has no RNR, a send that finds no receive is fatal.
	yrecv := []verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, 8)}}}
	y.QP.PostRecv(yrecv)
	go func() {
		defer wg.Done()
		send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{y.MR.SGE(64, 8)}}}
		recv := yrecv
		wc := make([]verbs.WC, 1)
		for range n {
			if echoErr = spin(y.RecvCQ, wc); echoErr != nil {
				return
			}
			y.QP.PostRecv(recv)
			y.QP.PostSend(send)
		}
	}()
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{x.MR.SGE(64, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{x.MR.SGE(0, 8)}}}
	wc := make([]verbs.WC, 1)
	x.QP.PostRecv(recv)
	for i := range n {
		x.QP.PostSend(send)
		if err := spin(x.RecvCQ, wc); err != nil {
			wg.Wait()
			t.Fatalf("iteration %d: %v; x: %v; y: %v; echo %v", i, err, cx.Err(), cy.Err(), echoErr)
		}
		x.QP.PostRecv(recv)
	}
	wg.Wait()
}
