package iwarp_test

import (
	"fmt"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

func benchPair(b testing.TB, size int) (x, y *conformance.Side) {
	b.Helper()
	o := conformance.PairOpts{BufSize: size, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, CQE: 1024}
	x = conformance.NewSide(b, open(b), verbs.QPTRC, o)
	y = conformance.NewSide(b, open(b), verbs.QPTRC, o)
	connect(b, x.QP, y.QP, iwarp.Params{IRD: 16, ORD: 16}, iwarp.Params{IRD: 16, ORD: 16})
	return x, y
}

// BenchmarkSendRecvPingPong measures 8-byte SEND/RECV round trips over
// loopback TCP between two goroutines that busy-poll their CQs (polled
// mode); ns/oneway is half a round trip, the figure perftest's send_lat and
// fi_pingpong report.
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
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			if err := conformance.WriteStream(x, y, size, b.N, 32); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkSendRecvPingPongLarge is BenchmarkSendRecvPingPong with large
// messages: one message's one-way time is how long the stream takes to
// carry it (perf send_lat -s 1048576).
func BenchmarkSendRecvPingPongLarge(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			x, y := benchPair(b, 2*size)
			conformance.BenchPingPongSize(b, x, y, size)
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

// BenchmarkSendRecvOneGoroutine posts an 8-byte inline signaled SEND and
// its receive and polls both CQs from one goroutine: one message's work on
// both sides, without the hand-over between two spinning goroutines, so
// that bench/callgrind.sh can count its instructions (and perf stat its
// system calls) per message.
func BenchmarkSendRecvOneGoroutine(b *testing.B) {
	x, y := benchPair(b, 4096)
	conformance.BenchSendRecvOneGoroutine(b, x, y)
}
