package faults_test

import (
	"fmt"

	"github.com/goverbs/goverbs/faults"
	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// committedBuggy is the kind of completion handler that fault injection
// exists to catch: it counts every completion as a committed write.
func committedBuggy(wcs []verbs.WC) int { return len(wcs) }

// committed counts only the writes that succeeded, up to the first
// failure: what follows a failure is flushed, not done.
func committed(wcs []verbs.WC) int {
	n := 0
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			break
		}
		n++
	}
	return n
}

// A log replicator writes five records to a peer and counts what is
// committed. The third write fails (RETRY_EXC_ERR, as when the peer's
// ACKs stop coming); the handler that assumes success reports all five.
func Example_handlerThatAssumesSuccess() {
	dev := loop.AddDevice("example-faults")
	ctx, _ := verbs.OpenDevice(dev)
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	defer pd.Dealloc()
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	defer mr.Dereg()
	cq, _ := ctx.CreateCQ(16, nil)
	defer cq.Destroy()
	cap := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	src, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
	dst, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
	defer src.Destroy()
	defer dst.Destroy()
	loop.Connect(src, dst)

	// The test turns the fault on; the replicator's code is unchanged.
	in, err := faults.Inject(faults.Plan{Rules: []faults.Rule{
		{Action: faults.Fail, Status: verbs.WCRetryExcErr, Device: dev, QPNum: src.Num(), Nth: 3}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Stop()

	for i := range 5 {
		src.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{mr.SGE(i*8, 8)}, RemoteAddr: mr.Addr() + 32, RKey: mr.RKey()}})
	}
	wcs := make([]verbs.WC, 0, 5)
	for len(wcs) < 5 {
		var wc [5]verbs.WC
		n, _ := cq.Poll(wc[:])
		wcs = append(wcs, wc[:n]...)
	}
	fmt.Printf("buggy handler: %d committed; correct handler: %d committed\n", committedBuggy(wcs), committed(wcs))
	for _, f := range in.Fired() {
		fmt.Println(f.Action, "request", f.Seq, f.Status.Name())
	}
	// Output:
	// buggy handler: 5 committed; correct handler: 2 committed
	// fail request 3 IBV_WC_RETRY_EXC_ERR
}
