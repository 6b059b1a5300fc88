package shm_test

import (
	"context"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// waitOne blocks in CQ.Wait (no spin: the wait sleeps at once) until cq
// has a completion, and returns it.
func waitOne(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	cq.SetWaitSpin(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if n, err := cq.Poll(wc); err != nil || n == 1 {
			if err != nil {
				t.Fatal(err)
			}
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion: %v", err)
		}
	}
}

// A requester that sleeps until its signaled SEND completes asks the
// responder for a poke when it acknowledges it. A responder whose
// application polls hands the message over and leaves that poke to the
// application's next call: here its reply, whose one poke wakes the
// requester for both the acknowledgement and the reply (two pokes
// before: one for each).
func TestAckPokeRidesOnReply(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, x := pairOn(t, true, 4096)
	cb := x.(*shm.Conn)
	for i := range 20 {
		b.MustPostRecv(t, b.Recv(uint64(i), 64, 64))
		a.MustPostRecv(t, a.Recv(uint64(100+i), 64, 64))
		before := cb.Pokes()
		done := make(chan [2]verbs.WC, 1)
		go func() { // the requester: SEND, sleep until it completes, then the reply
			a.MustPostSend(t, a.Send(uint64(1000+i), 0, 8))
			done <- [2]verbs.WC{waitOne(t, a.SendCQ), waitOne(t, a.RecvCQ)}
		}()
		// The responder polls until the request is in, then replies.
		rwc := make([]verbs.WC, 1)
		if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
			t.Fatal(err)
		}
		conformance.ExpectWC(t, rwc[0], uint64(i), verbs.WCSuccess, verbs.WCRecv)
		b.MustPostSend(t, b.Send(uint64(2000+i), 0, 8))
		got := <-done
		conformance.ExpectWC(t, got[0], uint64(1000+i), verbs.WCSuccess, verbs.WCSend)
		conformance.ExpectWC(t, got[1], uint64(100+i), verbs.WCSuccess, verbs.WCRecv)
		if err := conformance.Spin(b.SendCQ, rwc); err != nil {
			t.Fatal(err)
		}
		if n := cb.Pokes() - before; n > 1 && i > 0 {
			t.Fatalf("round %d: the responder poked %d times for an acknowledgement and a reply, want 1", i, n)
		}
	}
}

// The poke left to the responder's next call still comes when that call
// never does: the responder takes the message and stops calling, and the
// requester's SEND completes once polled mode ends (engine.PollIdle).
func TestAckPokeWithoutReply(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, _ := pairOn(t, true, 4096)
	b.MustPostRecv(t, b.Recv(1, 64, 64))
	done := make(chan verbs.WC, 1)
	go func() {
		a.MustPostSend(t, a.Send(7, 0, 8))
		done <- waitOne(t, a.SendCQ)
	}()
	rwc := make([]verbs.WC, 1)
	if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
		t.Fatal(err)
	}
	select {
	case wc := <-done:
		conformance.ExpectWC(t, wc, 7, verbs.WCSuccess, verbs.WCSend)
	case <-time.After(5 * time.Second):
		t.Fatal("the SEND never completed after its responder stopped calling")
	}
}
