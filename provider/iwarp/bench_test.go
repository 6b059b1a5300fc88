package iwarp_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/verbs"
)

func benchPair(b *testing.B, size int) (x, y *conformance.Side) {
	b.Helper()
	o := conformance.PairOpts{BufSize: size, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, CQE: 1024}
	x = conformance.NewSide(b, open(b), verbs.QPTRC, o)
	y = conformance.NewSide(b, open(b), verbs.QPTRC, o)
	connect(b, x.QP, y.QP, cm.Params{IRD: 16, ORD: 16}, cm.Params{IRD: 16, ORD: 16})
	return x, y
}

// BenchmarkSendRecvPingPong measures 8-byte SEND/RECV round trips over
// loopback TCP between two goroutines that busy-poll their CQs (polled
// mode); ns/oneway is half a round trip, the figure perftest's send_lat and
// fi_pingpong report.
func BenchmarkSendRecvPingPong(b *testing.B) {
	x, y := benchPair(b, 4096)
	rtt := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	if err := conformance.PingPong(x, y, b.N, rtt); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2, "ns/oneway-p50")
	b.ReportMetric(float64(rtt[len(rtt)*99/100].Nanoseconds())/2, "ns/oneway-p99")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/oneway")
}

// BenchmarkRDMAWrite measures RDMA WRITE bandwidth from completed bytes,
// with up to 32 writes in flight.
func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range []int{4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			x, y := benchPair(b, 2*size)
			wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, size)},
				RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}}
			wc := make([]verbs.WC, 64)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			out := 0
			for i := 0; i < b.N; {
				for out < 32 && i < b.N {
					if err := x.QP.PostSend(wr); err != nil {
						b.Fatal(err)
					}
					out++
					i++
				}
				n, _ := x.SendCQ.Poll(wc)
				out -= n
			}
			for out > 0 {
				n, _ := x.SendCQ.Poll(wc)
				out -= n
			}
			// A read after the writes: its completion means they all landed.
			x.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 8)},
				RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}})
			if err := conformance.Spin(x.SendCQ, wc); err != nil {
				b.Fatal(err)
			}
		})
	}
}
