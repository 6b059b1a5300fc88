package roce_test

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// TestLargeTransfersAllocateNothing: WRITEs, SENDs and READs whose
// packets leave with their payloads in place (batch.addRef: iovecs into
// the memory region), and with a payload that is not a multiple of 4 (a
// pad in the trailer), allocate nothing on post and poll. The
// provider-independent HotPathsAllocateNothing covers small messages.
func TestLargeTransfersAllocateNothing(t *testing.T) {
	const size = 64<<10 + 3
	x, y := benchPair(t, 2*size)
	wc := make([]verbs.WC, 1)
	var err error
	spin := func(cq *verbs.CQ) {
		for err == nil {
			n, perr := cq.Poll(wc)
			if perr != nil {
				err = perr
			} else if n == 1 {
				err = wc[0].Err()
				return
			}
			y.SendCQ.Poll(wc[:0]) // the target is driven by its polls
			y.RecvCQ.Poll(wc[:0])
		}
	}
	for _, c := range []struct {
		name string
		wr   []verbs.SendWR
		recv bool
	}{
		{"Write", []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, size)},
			RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}}, false},
		{"Send", []verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, size)}}}, true},
		{"Read", []verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(size, size)},
			RemoteAddr: y.MR.RemoteAddr(0), RKey: y.MR.RKey()}}, false},
	} {
		recv := []verbs.RecvWR{{WRID: 9, SGList: []verbs.SGE{y.MR.SGE(0, size)}}}
		f := func() {
			if c.recv && err == nil {
				err = y.QP.PostRecv(recv)
			}
			if err == nil {
				err = x.QP.PostSend(c.wr)
			}
			spin(x.SendCQ)
			if c.recv {
				spin(y.RecvCQ)
			}
		}
		for range 300 { // every slot of the send queue (256) gets its scratch slices
			f()
		}
		n := testing.AllocsPerRun(100, f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n != 0 {
			t.Errorf("%s of %d bytes: %v allocations per post and poll", c.name, size, n)
		}
	}
}
