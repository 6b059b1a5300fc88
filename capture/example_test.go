package capture_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goverbs/goverbs/capture"
	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// Recording the traffic of two loop QPs: a SEND of 5000 bytes is two
// packets at MTU 4096, and its acknowledgement a third; tshark -r FILE
// -d udp.port==4791,infiniband shows them.
func ExampleStart() {
	dev := loop.AddDevice("example-capture")
	ctx, _ := verbs.OpenDevice(dev)
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	defer pd.Dealloc()
	buf := make([]byte, 16384)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
	defer mr.Dereg()
	cq, _ := ctx.CreateCQ(16, nil)
	defer cq.Destroy()
	cap := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	a, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
	b, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
	defer a.Destroy()
	defer b.Destroy()
	loop.Connect(a, b)

	dir, _ := os.MkdirTemp("", "capture")
	defer os.RemoveAll(dir)
	rec, err := capture.Start(filepath.Join(dir, "loop.pcapng"), capture.Options{QPs: []uint32{a.Num()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	b.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(8192, 8192)}}})
	a.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 5000)}}})
	for n := 0; n < 2; {
		var wc [2]verbs.WC
		k, _ := cq.Poll(wc[:])
		n += k
	}
	rec.Stop()
	fmt.Println(rec.Packets(), "packets")
	// Output: 3 packets
}
