package iwarp_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// TestPingPongPolled: two goroutines exchange messages by busy-polling
// their CQs, with no help from the receive goroutines (polled mode).
func TestPingPongPolled(t *testing.T) {
	o := conformance.PairOpts{BufSize: 4096, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, CQE: 1024}
	x := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	y := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	cx, cy := connect(t, x.QP, y.QP, iwarp.Params{IRD: 16, ORD: 16}, iwarp.Params{IRD: 16, ORD: 16})
	// Few rounds: with one CPU (GOMAXPROCS=1) two spinning goroutines hand
	// over only at preemption, every 10 ms.
	n := 2000
	if runtime.GOMAXPROCS(0) < 2 {
		n = 50
	}
	if err := conformance.PingPong(x, y, n, nil); err != nil {
		t.Fatalf("%v; x: %v; y: %v", err, cx.Err(), cy.Err())
	}
}

// TestPollThenBlock: the application polls (the receive goroutine steps
// aside), then arms the CQ, polls once more and blocks on the channel, as
// rdma_get_recv_comp does; a message that arrives afterwards must still be
// received by the goroutine (a readiness edge consumed while stepping aside
// once stalled the connection).
func TestPollThenBlock(t *testing.T) {
	x, y, xq, rcq, ch := channelPair(t)
	for round := range 20 {
		if err := xq.PostRecv([]verbs.RecvWR{{WRID: uint64(round), SGList: []verbs.SGE{x.MR.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		for start := time.Now(); time.Since(start) < time.Millisecond; {
			rcq.Poll(wc[:]) // a polling loop: the receive goroutine steps aside
		}
		go func() {
			time.Sleep(2 * time.Millisecond)
			y.QP.PostSend([]verbs.SendWR{y.Send(uint64(round), 0, 8)})
		}()
		rcq.ReqNotify(false)
		// The verbs loop: an event may be left from a completion already
		// polled (one that came between ReqNotify and Poll), so after each
		// event the CQ is re-armed and polled again.
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for n, _ := rcq.Poll(wc[:]); n == 0; n, _ = rcq.Poll(wc[:]) {
			ev, err := ch.GetEvent(c)
			if err != nil {
				n, _ := rcq.Poll(wc[:])
				t.Fatalf("round %d: no completion event: %v (poll now: %d %+v; x %s; y %s)", round, err, n, wc[0], iwarp.DebugState(xq), iwarp.DebugState(y.QP))
			}
			ch.AckEvents(ev, 1)
			rcq.ReqNotify(false)
		}
		cancel()
		if wc[0].Status != verbs.WCSuccess || wc[0].WRID != uint64(round) {
			t.Fatalf("round %d: %+v", round, wc[0])
		}
		conformance.Poll1(t, y.SendCQ)
	}
}

// TestPollThenIdle: the application arms its CQ, polls for a while (the
// receive goroutine steps aside and keeps the socket from signalling
// arrivals), then stops polling without telling anyone and waits for the
// event. The receive goroutine must notice the idle poller by itself, take
// the socket back and deliver the message that arrived meanwhile.
func TestPollThenIdle(t *testing.T) {
	x, y, xq, rcq, ch := channelPair(t)
	for round := range 5 {
		if err := xq.PostRecv([]verbs.RecvWR{{WRID: uint64(round), SGList: []verbs.SGE{x.MR.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := rcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		for start := time.Now(); time.Since(start) < 2*time.Millisecond; {
			if n, _ := rcq.Poll(wc[:]); n != 0 {
				t.Fatalf("round %d: completion before the send: %+v", round, wc[0])
			}
		}
		// The poller is gone; the message comes while the goroutine still
		// believes it polls.
		if err := y.QP.PostSend([]verbs.SendWR{y.Send(uint64(round), 0, 8)}); err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := ch.GetEvent(c)
		cancel()
		if err != nil {
			t.Fatalf("round %d: no completion event: %v (x %s)", round, err, iwarp.DebugState(xq))
		}
		ch.AckEvents(ev, 1)
		if n, _ := rcq.Poll(wc[:]); n != 1 || wc[0].Status != verbs.WCSuccess || wc[0].WRID != uint64(round) {
			t.Fatalf("round %d: event, then %d completions %+v", round, n, wc[0])
		}
		conformance.Poll1(t, y.SendCQ)
	}
}

// channelPair connects y (which dials: the initiator speaks first) to xq,
// a QP of x whose receive CQ has a completion channel.
func channelPair(t *testing.T) (x, y *conformance.Side, xq *verbs.QP, rcq *verbs.CQ, ch *verbs.CompChannel) {
	t.Helper()
	return channelPairCap(t, verbs.QPCap{})
}

// channelPairCap is channelPair with y's queue capacities (zero: the
// conformance default).
func channelPairCap(t *testing.T, yCap verbs.QPCap) (x, y *conformance.Side, xq *verbs.QP, rcq *verbs.CQ, ch *verbs.CompChannel) {
	t.Helper()
	ctx0 := open(t)
	ch, err := ctx0.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	o := conformance.PairOpts{BufSize: 4096}
	x = conformance.NewSide(t, ctx0, verbs.QPTRC, o)
	// x's receive CQ with a channel, used instead of the side's own.
	rcq, err = ctx0.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcq.Destroy() })
	xq, err = x.PD.CreateQP(verbs.QPInitAttr{SendCQ: x.SendCQ, RecvCQ: rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { xq.Destroy() })
	o.Cap = yCap
	y = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	connect(t, y.QP, xq, iwarp.Params{IRD: 1, ORD: 1}, iwarp.Params{IRD: 1, ORD: 1})
	return x, y, xq, rcq, ch
}
