package verbs_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// pair creates two RC QPs on loop0 sharing one CQ and connects them.
func pair() (ctx *verbs.Context, pd *verbs.PD, cq *verbs.CQ, a, b *verbs.QP) {
	ctx, _ = verbs.OpenDevice(loop.DeviceName)
	pd, _ = ctx.AllocPD()
	cq, _ = ctx.CreateCQ(64, nil)
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}}
	a, _ = pd.CreateQP(attr)
	b, _ = pd.CreateQP(attr)
	if err := loop.Connect(a, b); err != nil {
		panic(err)
	}
	return
}

// Send a message from one QP to another and poll both completions.
func Example() {
	ctx, pd, cq, a, b := pair()
	defer ctx.Close()

	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if err != nil {
		panic(err)
	}
	copy(mr.Bytes(), "hello, RDMA")

	// The receiver posts a buffer before the sender sends (rdma_post_recv(3)).
	b.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(1024, 64)}}})
	a.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 11)}}})

	wc := make([]verbs.WC, 2)
	n := 0
	for n < 2 {
		k, _ := cq.Poll(wc[n:])
		n += k
	}
	for _, c := range wc {
		fmt.Printf("wr_id %d: %v %v, %d bytes\n", c.WRID, c.Opcode, c.Status, c.ByteLen)
	}
	fmt.Printf("%s\n", mr.Bytes()[1024:1035])
	// Output:
	// wr_id 1: RECV success, 11 bytes
	// wr_id 2: SEND success, 0 bytes
	// hello, RDMA
}

// Write into a peer's registered memory with RDMA WRITE: only the
// initiator gets a completion.
func ExampleQP_PostSend_rdmaWrite() {
	ctx, pd, cq, a, _ := pair()
	defer ctx.Close()

	local, _ := pd.RegMR([]byte("one-sided"), verbs.AccessLocalWrite)
	remote, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)

	a.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{local.SGE(0, 9)},
		RemoteAddr: remote.RemoteAddr(0), RKey: remote.RKey()}})

	var wc [1]verbs.WC
	for n, _ := cq.Poll(wc[:]); n == 0; n, _ = cq.Poll(wc[:]) {
	}
	fmt.Println(wc[0].Opcode, wc[0].Status, string(remote.Bytes()[:9]))
	// Output: RDMA_WRITE success one-sided
}

// The first work request that cannot be posted stops the list: the error
// names it (bad_wr), the requests before it are posted.
func ExampleBadWR() {
	ctx, pd, _, _, b := pair()
	defer ctx.Close()
	mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)

	err := b.PostRecv([]verbs.RecvWR{
		{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 8)}},
		{WRID: 2, SGList: make([]verbs.SGE, 3)}, // the QP allows 2 SGEs per receive
		{WRID: 3, SGList: []verbs.SGE{mr.SGE(8, 8)}},
	})
	fmt.Println("bad_wr:", verbs.BadWR(err))
	// Output: bad_wr: 1
}

// Block for completions the C way: arm the CQ, wait for the channel's
// event, acknowledge it, then poll.
func ExampleCompChannel() {
	ctx, _ := verbs.OpenDevice(loop.DeviceName)
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	ch, _ := ctx.CreateCompChannel()
	cq, _ := ctx.CreateCQ(16, ch)
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, _ := pd.CreateQP(attr)
	b, _ := pd.CreateQP(attr)
	loop.Connect(a, b)
	mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)

	cq.ReqNotify(false)
	go func() {
		b.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 8)}}})
		a.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(8, 8)}}})
	}()

	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evcq, err := ch.GetEvent(c)
	if err != nil {
		panic(err)
	}
	ch.AckEvents(evcq, 1)
	var wc [1]verbs.WC
	n, _ := evcq.Poll(wc[:])
	fmt.Println(n, wc[0].Opcode, wc[0].Status)
	// Output: 1 RECV success
}

// The README's example, line for line: two QPs of loop0, a SEND and its
// receive.
func Example_readme() {
	ctx, _ := verbs.OpenDevice("loop0")
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(64, nil)
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, _ := pd.CreateQP(attr)
	b, _ := pd.CreateQP(attr)
	loop.Connect(a, b) // RESET -> INIT -> RTR -> RTS, each the other's destination

	mr, _ := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	copy(mr.Bytes(), "hello")
	b.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(1024, 64)}}})
	a.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 5)}}})

	wc := make([]verbs.WC, 2)
	n, _ := cq.Poll(wc) // the send and the receive completions

	fmt.Println(n, "completions;", string(mr.Bytes()[1024:1029]))
	ctx.Close()
	// Output: 2 completions; hello
}

// A QP's counters, as a NIC's per-QP counters: what completed, by opcode,
// with its bytes.
func ExampleQP_Counters() {
	ctx, pd, cq, a, _ := pair()
	defer ctx.Close()
	mr, _ := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	defer mr.Dereg()
	for i := range 3 {
		a.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{mr.SGE(0, 100)}, RemoteAddr: mr.Addr() + 2048, RKey: mr.RKey()}})
	}
	for n := 0; n < 3; {
		var wc [3]verbs.WC
		k, _ := cq.Poll(wc[:])
		n += k
	}
	c, _ := a.Counters()
	w := c.Sent[verbs.WRRDMAWrite]
	fmt.Printf("%d RDMA WRITEs, %d bytes\n", w.Msgs, w.Bytes)
	// Output: 3 RDMA WRITEs, 300 bytes
}

// Follow each work request from its post to its polled completion with
// log/slog (SetTracer takes any Tracer: an OpenTelemetry span per WRID,
// say).
func ExampleSetTracer() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		// No time and no QP number: the output of an example must not vary.
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "qp" {
				return slog.Attr{}
			}
			return a
		},
	}))
	defer verbs.SetTracer(verbs.SetTracer(verbs.SlogTracer(log)))

	ctx, pd, cq, a, b := pair()
	defer ctx.Close()
	mr, _ := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	b.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(1024, 64)}}})
	a.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 8)}}})
	for n := 0; n < 2; {
		var wc [2]verbs.WC
		k, _ := cq.Poll(wc[:])
		n += k
	}
	// Output:
	// level=DEBUG msg="rdma post recv" wr_id=1 sges=1
	// level=DEBUG msg="rdma post send" wr_id=2 opcode=SEND sges=1 flags=2
	// level=DEBUG msg="rdma completion" wr_id=1 status=IBV_WC_SUCCESS opcode=RECV byte_len=8
	// level=DEBUG msg="rdma completion" wr_id=2 status=IBV_WC_SUCCESS opcode=SEND byte_len=0
}

// Post from one goroutine without the QP's lock: a QP created through a
// parent domain with a thread domain (ibv_alloc_td,
// ibv_alloc_parent_domain) promises a single poster, and the pure-Go
// providers then post an RDMA WRITE or READ posted alone without taking
// the lock. Regions of the PD work with the parent domain's QPs.
func ExampleContext_AllocTD() {
	ctx, _ := verbs.OpenDevice(loop.DeviceName)
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	td, err := ctx.AllocTD()
	if err != nil {
		panic(err)
	}
	parent, err := ctx.AllocParentDomain(verbs.ParentDomainAttr{PD: pd, TD: td})
	if err != nil {
		panic(err)
	}
	cq, _ := ctx.CreateCQ(64, nil)
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, _ := parent.CreateQP(attr) // in the thread domain: one goroutine posts to it
	b, _ := pd.CreateQP(attr)
	if err := loop.Connect(a, b); err != nil {
		panic(err)
	}

	local, _ := pd.RegMR([]byte("lock-free"), verbs.AccessLocalWrite)
	remote, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	a.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{local.SGE(0, 9)}, RemoteAddr: remote.RemoteAddr(0), RKey: remote.RKey()}})
	var wc [1]verbs.WC
	for n, _ := cq.Poll(wc[:]); n == 0; n, _ = cq.Poll(wc[:]) {
	}
	fmt.Println(wc[0].Status, string(remote.Bytes()[:9]), parent.TD() == td)

	// Freed in order: the QP, the parent domain, then its PD and TD.
	a.Destroy()
	fmt.Println(parent.Dealloc(), td.Dealloc())
	// Output:
	// success lock-free true
	// <nil> <nil>
}

// A type 2 memory window grants a peer 4 KiB of a region for as long as
// the application wants, then takes it back, without registering
// anything: a BIND_MW work request binds it, LOCAL_INV invalidates it.
func ExamplePD_AllocMW() {
	ctx, _ := verbs.OpenDevice("loop0")
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16, nil)
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, _ := pd.CreateQP(attr)
	b, _ := pd.CreateQP(attr)
	loop.Connect(a, b)
	mr, _ := pd.RegMR(make([]byte, 1<<16), verbs.AccessLocalWrite|verbs.AccessMWBind)
	mw, _ := pd.AllocMW(verbs.MWType2)

	rkey := verbs.IncRKey(mw.RKey())
	b.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		BindMW: &verbs.BindMW{MW: mw, RKey: rkey, Info: verbs.MWBindInfo{
			MR: mr, Addr: mr.RemoteAddr(4096), Length: 4096, Access: verbs.AccessRemoteWrite}}}})
	wc := make([]verbs.WC, 1)
	cq.Poll(wc)
	fmt.Println(wc[0].Opcode, wc[0].Status)

	// The peer (a) writes through the window's key (sent to it over the
	// connection, in a real program).
	copy(mr.Bytes(), "through the window")
	a.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 18)}, RemoteAddr: mr.RemoteAddr(4096), RKey: rkey}})
	cq.Poll(wc)
	fmt.Println(wc[0].Opcode, wc[0].Status, string(mr.Bytes()[4096:4096+18]))

	b.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey}})
	cq.Poll(wc)
	fmt.Println(wc[0].Opcode, wc[0].Status)
	// Output:
	// BIND_MW success
	// RDMA_WRITE success through the window
	// LOCAL_INV success
}

// A blocking wait of one's own (here for a value another goroutine puts
// in a mailbox) spins by a CQ's rules: it polls for as long as the
// AdaptiveSpin says, then sleeps, and reports how it went, so that the
// next wait spins longer or shorter.
func ExampleAdaptiveSpin() {
	var spin verbs.AdaptiveSpin
	spin.SetMax(50 * time.Microsecond)
	var box atomic.Int64
	ready := make(chan struct{}, 1)
	wait := func() int64 {
		start := time.Now()
		var watch verbs.SpinWatch
		watch.Start()
		for polls, d := 1, spin.For(); d > 0; polls++ {
			if v := box.Swap(0); v != 0 {
				took := time.Since(start)
				spin.Took(took, watch.Result(polls, took))
				return v
			}
			if time.Since(start) > d {
				break
			}
		}
		for {
			<-ready
			if v := box.Swap(0); v != 0 {
				spin.Took(time.Since(start), verbs.SpinSlept)
				return v
			}
		}
	}
	for i := int64(1); i <= 3; i++ {
		go func() {
			box.Store(i)
			select {
			case ready <- struct{}{}:
			default:
			}
		}()
		fmt.Println(wait())
	}
	// Output:
	// 1
	// 2
	// 3
}
