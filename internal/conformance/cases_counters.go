package conformance

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func init() {
	register(
		Case{Name: "CountersCountEveryRequest", Run: testCounters},
		Case{Name: "TracerSeesPostsAndCompletions", Run: testTracer},
	)
}

// A QP's counters count every completed request, signaled or not, by
// opcode and with its bytes, and the receives at the target; the device's
// counters include them.
func testCounters(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	before, err := a.Ctx.Counters()
	if err != nil {
		t.Fatalf("device counters: %v", err)
	}
	for i := range 3 {
		b.MustPostRecv(t, b.Recv(uint64(i), i*100, 100))
		wr := a.Send(uint64(i), 0, 10)
		if i == 0 {
			wr.Flags = 0 // unsignaled: counted all the same
		}
		a.MustPostSend(t, wr)
	}
	a.MustPostSend(t, verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.RemoteAddr(4096), RKey: b.MR.RKey()})
	PollN(t, a.SendCQ, 3)
	PollN(t, b.RecvCQ, 3)
	ac, err := a.QP.Counters()
	if err != nil {
		t.Fatalf("QP counters: %v", err)
	}
	if s := ac.Sent[verbs.WRSend]; s.Msgs != 3 || s.Bytes != 30 {
		t.Fatalf("sender counted %+v SENDs, want 3 of 30 bytes", s)
	}
	if w := ac.Sent[verbs.WRRDMAWrite]; w.Msgs != 1 || w.Bytes != 64 {
		t.Fatalf("sender counted %+v WRITEs, want 1 of 64 bytes", w)
	}
	bc, _ := b.QP.Counters()
	if bc.Received.Msgs != 3 || bc.Received.Bytes != 30 {
		t.Fatalf("receiver counted %+v, want 3 receives of 30 bytes", bc.Received)
	}
	after, _ := a.Ctx.Counters()
	if d := after.Sent[verbs.WRSend].Msgs - before.Sent[verbs.WRSend].Msgs; d < 3 {
		t.Fatalf("device counted %d more SENDs, want at least 3", d)
	}
	if after.QPs <= before.QPs-1 || after.QPs == 0 {
		t.Fatalf("device counted %d QPs", after.QPs)
	}
	// A destroyed QP's counts stay in its device's.
	bBefore, _ := b.Ctx.Counters()
	b.QP.Destroy()
	b.QP = nil
	if bAfter, _ := b.Ctx.Counters(); bAfter.Received.Msgs < bBefore.Received.Msgs {
		t.Fatalf("the device's receives went from %d to %d when a QP was destroyed", bBefore.Received.Msgs, bAfter.Received.Msgs)
	}
	a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	a.MustPostRecv(t, a.Recv(77, 0, 8))
	wc := Poll1(t, a.RecvCQ)
	if wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("receive in ERR: %s", Describe(wc))
	}
	if ac, _ = a.QP.Counters(); ac.RecvErrors[verbs.WCWRFlushErr] != 1 {
		t.Fatalf("flushed receives counted %d, want 1", ac.RecvErrors[verbs.WCWRFlushErr])
	}
}

type recTracer struct{ sends, recvs, comps []uint64 }

func (r *recTracer) SendPosted(_ *verbs.QP, wr *verbs.SendWR) { r.sends = append(r.sends, wr.WRID) }
func (r *recTracer) RecvPosted(_ *verbs.QP, wr *verbs.RecvWR) { r.recvs = append(r.recvs, wr.WRID) }
func (r *recTracer) Completed(_ *verbs.CQ, wc *verbs.WC)      { r.comps = append(r.comps, wc.WRID) }

// The tracer sees each posted request and each polled completion, with
// the WRIDs that tie them.
func testTracer(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	r := &recTracer{}
	old := verbs.SetTracer(r)
	defer verbs.SetTracer(old)
	b.MustPostRecv(t, b.Recv(5, 0, 64))
	a.MustPostSend(t, a.Send(6, 0, 8))
	Poll1(t, a.SendCQ)
	Poll1(t, b.RecvCQ)
	verbs.SetTracer(old)
	if len(r.sends) != 1 || r.sends[0] != 6 || len(r.recvs) != 1 || r.recvs[0] != 5 {
		t.Fatalf("posts traced: sends %v, receives %v", r.sends, r.recvs)
	}
	if len(r.comps) != 2 || r.comps[0] != 6 || r.comps[1] != 5 {
		t.Fatalf("completions traced: %v, want [6 5]", r.comps)
	}
}
