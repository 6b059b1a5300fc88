package iwarp_test

import (
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/verbs"
)

// pingPong runs n 8-byte SEND/RECV round trips from x to an echo goroutine
// on y, both busy-polling their CQs (polled mode: the poll loops read the
// sockets). When rtt is not nil it receives each round trip's duration.
func pingPong(x, y *conformance.Side, n int, rtt []time.Duration) error {
	// The echo side's first receive is posted before anything is sent:
	// iWARP has no RNR, a send that finds no receive is fatal.
	yrecv := []verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, 8)}}}
	if err := y.QP.PostRecv(yrecv); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var echoErr error
	go func() {
		defer wg.Done()
		send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{y.MR.SGE(64, 8)}}}
		wc := make([]verbs.WC, 1)
		for range n {
			if echoErr = spin(y.RecvCQ, wc); echoErr != nil {
				return
			}
			y.QP.PostRecv(yrecv)
			y.QP.PostSend(send)
		}
	}()
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{x.MR.SGE(64, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{x.MR.SGE(0, 8)}}}
	wc := make([]verbs.WC, 1)
	x.QP.PostRecv(recv)
	var err error
	for i := range n {
		t0 := time.Now()
		x.QP.PostSend(send)
		if err = spin(x.RecvCQ, wc); err != nil {
			break
		}
		if rtt != nil {
			rtt[i] = time.Since(t0)
		}
		x.QP.PostRecv(recv)
	}
	if err != nil {
		x.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState) // release the echo side
	}
	wg.Wait()
	if err == nil {
		err = echoErr
	}
	return err
}

// TestPingPongPolled: two goroutines exchange messages by busy-polling
// their CQs, with no help from the receive goroutines (polled mode).
func TestPingPongPolled(t *testing.T) {
	o := conformance.PairOpts{BufSize: 4096, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, CQE: 1024}
	x := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	y := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	cx, cy := connect(t, x.QP, y.QP, cm.Params{IRD: 16, ORD: 16}, cm.Params{IRD: 16, ORD: 16})
	if err := pingPong(x, y, 2000, nil); err != nil {
		t.Fatalf("%v; x: %v; y: %v", err, cx.Err(), cy.Err())
	}
}
