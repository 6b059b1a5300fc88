package iwarp_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// TestPollHandoffOrder: the completions that a poll's progress makes
// (receives on the receive CQ; Reads, among Sends completed at their post,
// on the send CQ) go into the poll's array when they may, and through the
// CQ's ring when they may not (the array full, the CQ not empty). Either
// way every completion is returned once, in order, with its length: polls
// with arrays of 1, 3 and 8 entries, several messages read at once.
func TestPollHandoffOrder(t *testing.T) {
	x, y := benchPair(t, 4096)
	for _, m := range []int{1, 3, 8} {
		t.Run(fmt.Sprintf("recv/array=%d", m), func(t *testing.T) {
			const k = 24
			for i := range k {
				x.MustPostRecv(t, x.Recv(uint64(i), 64*(i%8), 64))
			}
			// Posted before x polls: they arrive together, and one poll's
			// progress completes several.
			for i := range k {
				y.MustPostSend(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{y.MR.SGE(0, 1+i)}})
			}
			got := pollN(t, x.RecvCQ, k, m)
			for i, wc := range got {
				if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) || wc.Opcode != verbs.WCRecv || wc.ByteLen != uint32(1+i) {
					t.Fatalf("completion %d: %+v", i, wc)
				}
			}
		})
		t.Run(fmt.Sprintf("send/array=%d", m), func(t *testing.T) {
			const k = 24
			for i := range k {
				if i%3 == 1 {
					y.MustPostRecv(t, y.Recv(uint64(i), 0, 64))
				}
			}
			for i := range k {
				wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{x.MR.SGE(1024, 8+i)}, RemoteAddr: y.MR.RemoteAddr(0), RKey: y.MR.RKey()}
				if i%3 == 1 {
					wr = x.Send(uint64(i), 0, 8)
				}
				x.MustPostSend(t, wr)
			}
			got := pollN(t, x.SendCQ, k, m)
			for i, wc := range got {
				op, n := verbs.WCRDMARead, uint32(8+i)
				if i%3 == 1 {
					op, n = verbs.WCSend, 0
				}
				if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) || wc.Opcode != op || (op == verbs.WCRDMARead && wc.ByteLen != n) {
					t.Fatalf("completion %d: %+v", i, wc)
				}
			}
			pollN(t, y.RecvCQ, k/3, 8)
		})
	}
}

// pollN polls cq with arrays of m entries until it has k completions.
func pollN(t *testing.T, cq *verbs.CQ, k, m int) []verbs.WC {
	t.Helper()
	var got []verbs.WC
	wc := make([]verbs.WC, m)
	for start := time.Now(); len(got) < k; {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wc[:n]...)
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d completions of %d after 10 s: %+v", len(got), k, got)
		}
	}
	if len(got) > k {
		t.Fatalf("%d completions, want %d: %+v", len(got), k, got)
	}
	return got
}

// TestNoFDUseAfterClose: the polled paths use the socket's descriptor
// without the runtime's reference count; once the connection has closed
// it, they must not touch the number, which the process may have given
// to another file (iwarp.FDAfterClose), whichever side ended it.
func TestNoFDUseAfterClose(t *testing.T) {
	for _, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			o := conformance.PairOpts{BufSize: 4096}
			x := conformance.NewSide(t, open(t), verbs.QPTRC, o)
			y := conformance.NewSide(t, open(t), verbs.QPTRC, o)
			cx, cy := connect(t, x.QP, y.QP, iwarp.Params{IRD: 1, ORD: 1}, iwarp.Params{IRD: 1, ORD: 1})
			// Polled mode, with a message through, before the end.
			x.MustPostRecv(t, x.Recv(1, 0, 64))
			y.MustPostSend(t, y.Send(1, 0, 8))
			pollN(t, x.RecvCQ, 1, 1)
			if local {
				cx.Disconnect()
			} else {
				cy.Disconnect()
			}
			if err := iwarp.FDAfterClose(cx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
