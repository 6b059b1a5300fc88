package loop_test

import (
	"testing"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// allocRig is a connected RC pair on loop0 for the allocation tests.
type allocRig struct {
	a, b        *verbs.QP
	acq, bcq    *verbs.CQ // each side's single CQ (send and receive)
	amr, bmr    *verbs.MR
	send, write []verbs.SendWR
	recv        []verbs.RecvWR
	wc          []verbs.WC
}

func newAllocRig(t *testing.T) *allocRig {
	t.Helper()
	r := &allocRig{}
	side := func() (*verbs.QP, *verbs.CQ, *verbs.MR) {
		ctx, err := verbs.OpenDevice(loop.DeviceName)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		pd, err := ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pd.Dealloc() })
		cq, err := ctx.CreateCQ(64, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cq.Destroy() })
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mr.Dereg() })
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Destroy() })
		return qp, cq, mr
	}
	r.a, r.acq, r.amr = side()
	r.b, r.bcq, r.bmr = side()
	if err := loop.Connect(r.a, r.b); err != nil {
		t.Fatal(err)
	}
	r.send = []verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{r.amr.SGE(0, 64)}}}
	r.write = []verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{r.amr.SGE(0, 256)}, RemoteAddr: r.bmr.RemoteAddr(1024), RKey: r.bmr.RKey()}}
	r.recv = []verbs.RecvWR{{WRID: 3, SGList: []verbs.SGE{r.bmr.SGE(0, 64)}}}
	r.wc = make([]verbs.WC, 4)
	return r
}

// poll1 polls cq and fails unless it returned exactly one successful completion.
func (r *allocRig) poll1(t *testing.T, cq *verbs.CQ) {
	n, err := cq.Poll(r.wc)
	if err != nil || n != 1 || r.wc[0].Status != verbs.WCSuccess {
		t.Fatalf("Poll = %d, %v (%+v); want one successful completion", n, err, r.wc[:n])
	}
}

// TestPostPollNoAlloc checks the promise of verbs.CQ.Poll ("never
// allocates") and of the data path as a whole: once warm, posting with
// preallocated work requests and polling into a preallocated slice allocate
// nothing.
func TestPostPollNoAlloc(t *testing.T) {
	r := newAllocRig(t)
	const runs = 200

	sendRecv := func() {
		if err := r.b.PostRecv(r.recv); err != nil {
			t.Fatal(err)
		}
		if err := r.a.PostSend(r.send); err != nil {
			t.Fatal(err)
		}
		r.poll1(t, r.acq)
		r.poll1(t, r.bcq)
	}
	write := func() {
		if err := r.a.PostSend(r.write); err != nil {
			t.Fatal(err)
		}
		r.poll1(t, r.acq)
	}
	emptyPoll := func() {
		if n, err := r.acq.Poll(r.wc); n != 0 || err != nil {
			t.Fatalf("Poll of an empty CQ = %d, %v", n, err)
		}
	}
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"SendRecvPoll", sendRecv},
		{"RDMAWritePoll", write},
		{"EmptyPoll", emptyPoll},
	} {
		for range 10 { // warm up: scratch slices grow to their final size
			c.f()
		}
		if n := testing.AllocsPerRun(runs, c.f); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", c.name, n)
		}
	}
}
