package conformance

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func init() {
	register(Case{Name: "HotPathsAllocateNothing", Run: testHotPathsAllocateNothing})
}

// testHotPathsAllocateNothing: posting, polling and the transport's work
// between them (polled mode drives it from Poll) allocate nothing, for
// SEND/RECV, RDMA WRITE, RDMA READ, a list of a WRITE and a SEND (which a
// transport may write together) and a poll of an empty CQ.
func testHotPathsAllocateNothing(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	send := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}}}
	write := []verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)},
		RemoteAddr: b.MR.RemoteAddr(256), RKey: b.MR.RKey()}}
	read := []verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(512, 64)},
		RemoteAddr: b.MR.RemoteAddr(256), RKey: b.MR.RKey()}}
	list := []verbs.SendWR{write[0], send[0]}
	recv := []verbs.RecvWR{{WRID: 3, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}}
	wc := make([]verbs.WC, 4)
	var err error
	// spin polls cq for one completion, polling other (which gets none)
	// too: a target whose application polls is driven by its polls.
	spin := func(cq, other *verbs.CQ) {
		for err == nil {
			n, perr := cq.Poll(wc[:1])
			if perr != nil {
				err = perr
			} else if n == 1 {
				err = wc[0].Err()
				return
			}
			if n, perr := other.Poll(wc[1:2]); n != 0 || perr != nil {
				t.Fatalf("unexpected completion: %d, %v", n, perr)
			}
		}
	}
	sendRecv := func() {
		if err == nil {
			err = b.QP.PostRecv(recv)
		}
		if err == nil {
			err = a.QP.PostSend(send)
		}
		spin(a.SendCQ, b.SendCQ)
		spin(b.RecvCQ, a.RecvCQ)
	}
	writePoll := func() {
		if err == nil {
			err = a.QP.PostSend(write)
		}
		spin(a.SendCQ, b.RecvCQ)
	}
	readPoll := func() {
		if err == nil {
			err = a.QP.PostSend(read)
		}
		spin(a.SendCQ, b.RecvCQ)
	}
	listPoll := func() {
		if err == nil {
			err = b.QP.PostRecv(recv)
		}
		if err == nil {
			err = a.QP.PostSend(list)
		}
		spin(a.SendCQ, b.SendCQ)
		spin(a.SendCQ, b.SendCQ)
		spin(b.RecvCQ, a.RecvCQ)
	}
	emptyPoll := func() {
		if n, perr := a.RecvCQ.Poll(wc); n != 0 || perr != nil {
			t.Fatalf("Poll of an empty CQ = %d, %v", n, perr)
		}
	}
	for _, c := range []struct {
		name string
		f    func()
	}{{"SendRecvPoll", sendRecv}, {"RDMAWritePoll", writePoll}, {"RDMAReadPoll", readPoll}, {"ListPoll", listPoll}, {"EmptyPoll", emptyPoll}} {
		for range 20 { // warm up: scratch slices grow to their final size, regions get mapped
			c.f()
		}
		n := testing.AllocsPerRun(200, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", c.name, n)
		}
	}
}
