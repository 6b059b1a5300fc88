package roce_test

import (
	"fmt"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

func benchPair(b testing.TB, size int) (x, y *conformance.Side) {
	b.Helper()
	o := conformance.PairOpts{BufSize: size, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, CQE: 1024}
	ca, cb := fixture{}.Open(b)
	x = conformance.NewSide(b, ca, verbs.QPTRC, o)
	y = conformance.NewSide(b, cb, verbs.QPTRC, o)
	attr := verbs.QPAttr{PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16, MaxDestRdAtomic: 16,
		MinRNRTimer: 1, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	if err := (fixture{}).Connect(b, x.QP, y.QP, attr); err != nil {
		b.Fatal(err)
	}
	return x, y
}

// BenchmarkSendRecvPingPong measures 8-byte SEND/RECV round trips over
// loopback UDP between two goroutines that busy-poll their CQs (polled
// mode); ns/oneway is half a round trip.
func BenchmarkSendRecvPingPong(b *testing.B) {
	x, y := benchPair(b, 4096)
	conformance.BenchPingPong(b, x, y)
}

// BenchmarkRDMAWrite measures RDMA WRITE bandwidth from completed bytes,
// with up to 32 writes in flight.
func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range []int{4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			x, y := benchPair(b, 2*size)
			_, dy := devices(b)
			c0, _ := roce.DeviceCounters(dy)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			if err := conformance.WriteStream(x, y, size, b.N, 32); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			// Dropped packets cost retransmissions: the figure means little
			// if the receiver dropped any.
			c1, _ := roce.DeviceCounters(dy)
			b.ReportMetric(float64(c1.BadICRC-c0.BadICRC+c1.Malformed-c0.Malformed), "dropped")
		})
	}
}

// BenchmarkRDMAWriteList measures the rate of 64-byte RDMA WRITEs posted
// in lists of 16 (perftest's post_list), which the transport writes
// together (engine.Batcher); ns/op is per WRITE.
func BenchmarkRDMAWriteList(b *testing.B) {
	x, y := benchPair(b, 4096)
	conformance.BenchWriteLists(b, x, y)
}
