package iwarp_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// A peer that sends a message and then resets the connection (a librdmacm
// rsocket server that exits with our last message unread in its socket):
// a SEND of ours that meets the reset does not end the connection before
// the peer's message, which came ahead of the reset, is received. The
// receive side here is held until our SENDs have met the reset, so that
// the message is still in the socket then; the receive completes, and
// the SENDs and an unused receive are flushed once the reset is read.
func TestResetAfterMessageDelivered(t *testing.T) {
	for round := range 3 {
		x, y := pair(t, conformance.PairOpts{})
		x.MustPostRecv(t, x.Recv(1, 0, 64), x.Recv(2, 64, 64))
		release := iwarp.HoldRx(x.QP)
		conformance.Fill(y.Buf[:8], byte(round))
		y.MustPostSend(t, y.Send(7, 0, 8))
		conformance.ExpectWC(t, conformance.Poll1(t, y.SendCQ), 7, verbs.WCSuccess, verbs.WCSend)
		iwarp.Reset(y.QP)
		time.Sleep(20 * time.Millisecond) // the reset reaches x's socket
		// The first write may still go out (into the reset socket's void);
		// the next ones meet the error.
		x.MustPostSend(t, x.Send(10, 0, 8))
		x.MustPostSend(t, x.Send(11, 0, 8))
		x.MustPostSend(t, x.Send(12, 0, 8))
		time.Sleep(20 * time.Millisecond)
		release()
		wc := conformance.Poll1(t, x.RecvCQ)
		if wc.WRID != 1 || wc.Status != verbs.WCSuccess || wc.ByteLen != 8 {
			t.Fatalf("round %d: receive: %s, want wr_id 1, success, 8 bytes (the message sent before the reset)", round, conformance.Describe(wc))
		}
		if got, want := x.Buf[:8], y.Buf[:8]; string(got) != string(want) {
			t.Fatalf("round %d: received %x, want %x", round, got, want)
		}
		wc = conformance.Poll1(t, x.RecvCQ)
		if wc.WRID != 2 || wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("round %d: unused receive: %s, want wr_id 2 flushed", round, conformance.Describe(wc))
		}
		for _, id := range []uint64{10, 11, 12} {
			wc := conformance.Poll1(t, x.SendCQ)
			if wc.WRID != id || (wc.Status != verbs.WCWRFlushErr && wc.Status != verbs.WCLocQPOpErr && wc.Status != verbs.WCSuccess) {
				t.Fatalf("round %d: send: %s, want wr_id %d flushed (or written before the reset)", round, conformance.Describe(wc), id)
			}
		}
		conformance.WaitState(t, x.QP, verbs.QPSErr)
	}
}
