//go:build rdmacore && linux && cgo

package rdmacore_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/rdmacore"
	"github.com/goverbs/goverbs/verbs"
)

// The cost of goverbs' cgo path per work request, against the same loop in
// C, in one run: BenchmarkWritePostPoll/go and /c post one signaled 8-byte
// RDMA WRITE and poll its completion; /go-batch32 posts 32 as one list and
// polls them (one crossing each way per 32). ns/op is per WRITE.
// /poll-empty and /poll-empty-c poll an idle CQ (16 entries) from Go and
// from C: their difference is the cost of one cgo crossing.
func BenchmarkWritePostPoll(b *testing.B) {
	devs := testDevices(b)
	for _, dev := range devs {
		f := &fixture{dev: dev}
		ctx := openDev(b, dev)
		f.iwarp = ctx.Device().TransportType() == verbs.TransportIWARP
		if f.iwarp {
			f.addr = deviceAddr(b, dev)
		}
		x, y := conformance.NewPair(b, f, conformance.PairOpts{Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		sge := x.MR.SGE(0, 8)
		raddr, rkey := y.MR.RemoteAddr(0), y.MR.RKey()
		b.Run(dev+"/go", func(b *testing.B) {
			wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{sge}, RemoteAddr: raddr, RKey: rkey}}
			wc := make([]verbs.WC, 1)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := x.QP.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				for {
					n, err := x.SendCQ.Poll(wc)
					if err != nil || (n == 1 && wc[0].Status != verbs.WCSuccess) {
						b.Fatalf("Poll: %v %+v", err, wc[0])
					}
					if n == 1 {
						break
					}
				}
			}
		})
		b.Run(dev+"/c", func(b *testing.B) {
			if err := rdmacore.CWriteLoop(x.QP, x.SendCQ, b.N, sge, raddr, rkey); err != nil {
				b.Fatal(err)
			}
		})
		b.Run(dev+"/go-batch32", func(b *testing.B) {
			wr := make([]verbs.SendWR, 32)
			for i := range wr {
				wr[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{sge}, RemoteAddr: raddr, RKey: rkey}
			}
			wc := make([]verbs.WC, 32)
			b.ReportAllocs()
			for i := 0; i < b.N; i += 32 {
				if err := x.QP.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < 32; {
					n, err := x.SendCQ.Poll(wc[:32-got])
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
		b.Run(dev+"/poll-empty-c", func(b *testing.B) {
			if n := rdmacore.CPollEmpty(x.SendCQ, b.N); n != 0 {
				b.Fatalf("%d completions on an idle CQ", n)
			}
		})
		b.Run(dev+"/poll-empty", func(b *testing.B) {
			wc := make([]verbs.WC, 16)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := x.SendCQ.Poll(wc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCgoCrossing is the cost of one call into C and back on this
// machine (no device needed): what goverbs adds per PostSend, PostRecv and
// Poll call over calling libibverbs from C, before its Go-side work.
func BenchmarkCgoCrossing(b *testing.B) {
	s := 0
	for i := 0; i < b.N; i++ {
		s += rdmacore.CgoNop(i & 1)
	}
	if s < 0 {
		b.Fatal(s)
	}
}
