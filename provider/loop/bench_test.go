package loop_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// benchPair is two connected RC QPs on loop0 with one registered buffer each.
type benchPair struct {
	ctx      *verbs.Context
	pd       *verbs.PD
	scq, rcq [2]*verbs.CQ
	qp       [2]*verbs.QP
	mr       [2]*verbs.MR
}

func newBenchPair(b *testing.B, size int) *benchPair {
	b.Helper()
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		b.Fatal(err)
	}
	p := &benchPair{ctx: ctx}
	p.pd, _ = ctx.AllocPD()
	for i := range 2 {
		p.scq[i], _ = ctx.CreateCQ(1024, nil)
		p.rcq[i], _ = ctx.CreateCQ(1024, nil)
		p.qp[i], err = p.pd.CreateQP(verbs.QPInitAttr{SendCQ: p.scq[i], RecvCQ: p.rcq[i], QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			b.Fatal(err)
		}
		p.mr[i], err = p.pd.RegMR(make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := loop.Connect(p.qp[0], p.qp[1]); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for i := range 2 {
			p.qp[i].Destroy()
			p.mr[i].Dereg()
			p.scq[i].Destroy()
			p.rcq[i].Destroy()
		}
		p.pd.Dealloc()
		ctx.Close()
	})
	return p
}

func spinPoll(cq *verbs.CQ, wc []verbs.WC) {
	for {
		n, _ := cq.Poll(wc)
		if n > 0 {
			if wc[0].Status != verbs.WCSuccess {
				panic(wc[0].Status.String())
			}
			return
		}
	}
}

// BenchmarkSendRecvRate measures the message rate of 8-byte signaled
// SEND/RECV on one goroutine: post a receive, post a send, poll both CQs.
func BenchmarkSendRecvRate(b *testing.B) {
	p := newBenchPair(b, 4096)
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{p.mr[0].SGE(0, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{p.mr[1].SGE(0, 8)}}}
	wc := make([]verbs.WC, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.qp[1].PostRecv(recv)
		p.qp[0].PostSend(send)
		spinPoll(p.scq[0], wc)
		spinPoll(p.rcq[1], wc)
	}
}

// pingPong runs b.N round trips between two goroutines that busy-poll
// their receive CQs; mk gives side i its send and receive requests.
func pingPong(b *testing.B, p *benchPair, mk func(i int) ([]verbs.SendWR, []verbs.RecvWR)) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the echo side
		defer wg.Done()
		send, recv := mk(1)
		wc := make([]verbs.WC, 4)
		p.qp[1].PostRecv(recv)
		for range b.N {
			spinPoll(p.rcq[1], wc)
			p.qp[1].PostRecv(recv)
			p.qp[1].PostSend(send)
		}
	}()
	send, recv := mk(0)
	wc := make([]verbs.WC, 4)
	p.qp[0].PostRecv(recv)
	b.ResetTimer()
	for range b.N {
		p.qp[0].PostSend(send)
		spinPoll(p.rcq[0], wc)
		p.qp[0].PostRecv(recv)
	}
	b.StopTimer()
	wg.Wait()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/oneway")
}

// BenchmarkSendRecvPingPong measures the one-way latency of 8-byte
// SEND/RECV between two goroutines that busy-poll their receive CQs: each
// iteration is one round trip, reported as ns/op and as half of it.
func BenchmarkSendRecvPingPong(b *testing.B) {
	p := newBenchPair(b, 4096)
	pingPong(b, p, func(i int) ([]verbs.SendWR, []verbs.RecvWR) {
		return []verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{p.mr[i].SGE(64, 8)}}},
			[]verbs.RecvWR{{SGList: []verbs.SGE{p.mr[i].SGE(0, 8)}}}
	})
}

// BenchmarkRDMAWrite measures RDMA WRITE bandwidth: a window of signaled
// writes kept in flight and completions polled, per message size.
func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range []int{8, 4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			p := newBenchPair(b, 2*size)
			wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{p.mr[0].SGE(0, size)},
				RemoteAddr: p.mr[1].RemoteAddr(size), RKey: p.mr[1].RKey()}}
			wc := make([]verbs.WC, 64)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			out := 0
			for i := 0; i < b.N; {
				for out < 256 && i < b.N {
					if err := p.qp[0].PostSend(wr); err != nil {
						b.Fatal(err)
					}
					out++
					i++
				}
				n, _ := p.scq[0].Poll(wc)
				out -= n
			}
			for out > 0 {
				n, _ := p.scq[0].Poll(wc)
				out -= n
			}
		})
	}
}

// BenchmarkRDMAWriteImmPingPong measures RDMA WRITE latency as perftest's
// write_lat does, with the immediate's receive completion as the signal:
// one iteration is a round trip.
func BenchmarkRDMAWriteImmPingPong(b *testing.B) {
	p := newBenchPair(b, 4096)
	pingPong(b, p, func(i int) ([]verbs.SendWR, []verbs.RecvWR) {
		o := 1 - i
		return []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, SGList: []verbs.SGE{p.mr[i].SGE(0, 8)},
				RemoteAddr: p.mr[o].RemoteAddr(64), RKey: p.mr[o].RKey()}},
			[]verbs.RecvWR{{}}
	})
}
