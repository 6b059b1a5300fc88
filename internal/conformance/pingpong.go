package conformance

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// PingPong runs n 8-byte SEND/RECV round trips from x to an echo goroutine
// on y, both busy-polling their CQs (polled mode: the poll loops read the
// sockets). When rtt is not nil it receives each round trip's duration.
func PingPong(x, y *Side, n int, rtt []time.Duration) error {
	// The echo side's first receive is posted before anything is sent:
	// on iWARP (no RNR) a send that finds no receive is fatal.
	yrecv := []verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, 8)}}}
	if err := y.QP.PostRecv(yrecv); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var echoErr error
	go func() {
		defer wg.Done()
		send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{y.MR.SGE(64, 8)}}}
		wc := make([]verbs.WC, 1)
		for range n {
			if echoErr = Spin(y.RecvCQ, wc); echoErr != nil {
				return
			}
			y.QP.PostRecv(yrecv)
			y.QP.PostSend(send)
		}
	}()
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{x.MR.SGE(64, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{x.MR.SGE(0, 8)}}}
	wc := make([]verbs.WC, 1)
	x.QP.PostRecv(recv)
	var err error
	for i := range n {
		t0 := time.Now()
		x.QP.PostSend(send)
		if err = Spin(x.RecvCQ, wc); err != nil {
			break
		}
		if rtt != nil {
			rtt[i] = time.Since(t0)
		}
		x.QP.PostRecv(recv)
	}
	if err != nil {
		x.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState) // release the echo side
	}
	wg.Wait()
	if err == nil {
		err = echoErr
	}
	return err
}

// Spin busy-polls cq until one completion arrives (polled mode: the poll
// loop itself drives the provider) and returns its error status, if any.
func Spin(cq *verbs.CQ, wc []verbs.WC) error {
	for {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return wc[0].Err()
		}
	}
}

// WriteStream posts n RDMA WRITEs of size bytes from x's buffer to y's
// buffer at offset size, keeping up to depth in flight, and waits for all
// of them, then for an RDMA READ behind them (its completion means every
// write has landed, also where a write completes at hand-off). The
// bandwidth benchmarks time it.
func WriteStream(x, y *Side, size, n, depth int) error {
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, size)},
		RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}}
	wc := make([]verbs.WC, 64)
	out := 0
	for i := 0; i < n || out > 0; {
		for out < depth && i < n {
			if err := x.QP.PostSend(wr); err != nil {
				return err
			}
			out++
			i++
		}
		k, err := x.SendCQ.Poll(wc)
		if err != nil {
			return err
		}
		for _, w := range wc[:k] {
			if err := w.Err(); err != nil {
				return err
			}
		}
		out -= k
	}
	err := x.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 8)},
		RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}})
	if err != nil {
		return err
	}
	return Spin(x.SendCQ, wc)
}

// BenchPingPong runs b.N round trips of PingPong and reports half their
// mean (ns/oneway, what perftest's send_lat and fi_pingpong report), median
// and 99th percentile. The round-trip array is written before the timer
// starts: its first-touch page faults are not the transport's.
func BenchPingPong(b *testing.B, x, y *Side) {
	rtt := make([]time.Duration, b.N)
	for i := range rtt {
		rtt[i] = 1
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := PingPong(x, y, b.N, rtt); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2, "ns/oneway-p50")
	b.ReportMetric(float64(rtt[len(rtt)*99/100].Nanoseconds())/2, "ns/oneway-p99")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/oneway")
}
