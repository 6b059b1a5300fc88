package shm_test

import (
	"fmt"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

func benchPair(b testing.TB, size int) (x, y *conformance.Side) {
	return benchPairTD(b, size, false)
}

// benchPairTD is benchPair with the QPs in thread domains when td.
func benchPairTD(b testing.TB, size int, td bool) (x, y *conformance.Side) {
	b.Helper()
	o := conformance.PairOpts{BufSize: size, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64},
		CQE: 1024, Alloc: directFixture{}.Buffer, TD: td}
	x = conformance.NewSide(b, open(b), verbs.QPTRC, o)
	y = conformance.NewSide(b, open(b), verbs.QPTRC, o)
	for _, q := range []*verbs.QP{x.QP, y.QP} {
		if err := conformance.ToInit(q, conformance.DefaultRC.QPAccessFlags); err != nil {
			b.Fatal(err)
		}
	}
	connect(b, x.QP, y.QP, shm.Params{IRD: 16, ORD: 16, RNRRetry: 7}, shm.Params{IRD: 16, ORD: 16, RNRRetry: 7})
	return x, y
}

// BenchmarkSendRecvPingPong measures 8-byte SEND/RECV round trips between
// two goroutines that busy-poll their CQs; ns/oneway is half a round trip
// (the figure of perftest's send_lat and UCX's ucp_am_lat).
func BenchmarkSendRecvPingPong(b *testing.B) {
	x, y := benchPair(b, 4096)
	conformance.BenchPingPong(b, x, y)
}

// BenchmarkRDMAWrite measures RDMA WRITE bandwidth to memfd memory (the
// initiator copies into the target's mapping) from completed bytes.
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

// BenchmarkMemcpy is the baseline of BenchmarkRDMAWrite: copy between two
// AllocBuffers in one goroutine.
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range []int{4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			src, dst := directFixture{}.Buffer(b, size), directFixture{}.Buffer(b, size)
			b.SetBytes(int64(size))
			for range b.N {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkSendRecvOneGoroutine posts an 8-byte SEND and polls its receive
// and send completions in one goroutine: the CPU cost of a message, without
// cache lines moving between cores.
func BenchmarkSendRecvOneGoroutine(b *testing.B) {
	x, y := benchPair(b, 4096)
	conformance.BenchSendRecvOneGoroutine(b, x, y)
}

// BenchmarkRDMAWriteRate measures the RDMA WRITE message rate the way
// `goverbs perf write_bw` drives it: up to 128 requests in flight, every
// 100th signaled (perftest's cq_mod), the send CQ polled between bursts,
// one PostSend per request (list=1) or lists of requests; td=1 creates
// the QPs in thread domains (verbs.TD). ns/op is one message.
func BenchmarkRDMAWriteRate(b *testing.B) {
	for _, size := range []int{8, 4096} {
		for _, list := range []int{1, 16} {
			for _, td := range []bool{false, true} {
				if td && list != 1 {
					continue // a list takes the lock
				}
				name := fmt.Sprintf("size=%d/list=%d", size, list)
				if td {
					name += "/td=1"
				}
				b.Run(name, func(b *testing.B) {
					x, y := benchPairTD(b, size, td)
					b.SetBytes(int64(size))
					conformance.WriteRate(b, x, y, size, list, 128, 100)
				})
			}
		}
	}
}
