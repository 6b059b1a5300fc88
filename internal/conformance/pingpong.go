package conformance

import (
	"runtime"
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
	return PingPongSize(x, y, 8, n, rtt)
}

// PingPongSize is PingPong with messages of size bytes (inline up to 64),
// received at offset 0 of each side's buffer and sent from offset size
// (the buffers hold 2*size bytes).
func PingPongSize(x, y *Side, size, n int, rtt []time.Duration) error {
	flags := verbs.SendFlags(0)
	if size <= 64 {
		flags, size = verbs.SendInline, max(size, 64) // the 8-byte layout: receive at 0, send from 64
	}
	ln := min(size, 64)
	if flags == 0 {
		ln = size
	}
	// The echo side's first receive is posted before anything is sent:
	// on iWARP (no RNR) a send that finds no receive is fatal.
	yrecv := []verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, ln)}}}
	if err := y.QP.PostRecv(yrecv); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var echoErr error
	go func() {
		defer wg.Done()
		send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: flags, SGList: []verbs.SGE{y.MR.SGE(size, ln)}}}
		wc := make([]verbs.WC, 1)
		for range n {
			if echoErr = Spin(y.RecvCQ, wc); echoErr != nil {
				return
			}
			y.QP.PostRecv(yrecv)
			y.QP.PostSend(send)
		}
	}()
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: flags, SGList: []verbs.SGE{x.MR.SGE(size, ln)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{x.MR.SGE(0, ln)}}}
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
	wc := make([]verbs.WC, 64)
	if err := writeLists(x, y, size, n, 1, depth, wc); err != nil {
		return err
	}
	err := x.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 8)},
		RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}})
	if err != nil {
		return err
	}
	return Spin(x.SendCQ, wc)
}

// WriteLists is WriteStream posting lists of list RDMA WRITEs of size
// bytes (perftest's post_list), the last of each list signaled, with up
// to depth writes in flight (depth a multiple of list); n is rounded up
// to whole lists. It waits for the writes' completions only.
func WriteLists(x, y *Side, size, n, list, depth int) error {
	return writeLists(x, y, size, n, list, depth, make([]verbs.WC, 64))
}

func writeLists(x, y *Side, size, n, list, depth int, wc []verbs.WC) error {
	wr := make([]verbs.SendWR, list)
	for i := range wr {
		wr[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{x.MR.SGE(0, size)},
			RemoteAddr: y.MR.RemoteAddr(size), RKey: y.MR.RKey()}
	}
	wr[list-1].Flags = verbs.SendSignaled
	out := 0
	for i := 0; i < n || out > 0; {
		for out+list <= depth && i < n {
			if err := x.QP.PostSend(wr); err != nil {
				return err
			}
			out += list
			i += list
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
		out -= k * list
	}
	return nil
}

// BenchWriteLists measures 64-byte RDMA WRITEs posted in lists of 16
// (WriteLists); ns/op is per WRITE.
func BenchWriteLists(b *testing.B, x, y *Side) {
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	if err := WriteLists(x, y, 64, b.N, 16, 128); err != nil {
		b.Fatal(err)
	}
}

// BenchPingPong runs b.N round trips of PingPong and reports half their
// mean (ns/oneway, what perftest's send_lat and fi_pingpong report), median
// and 99th percentile. The round-trip array is written before the timer
// starts: its first-touch page faults are not the transport's.
func BenchPingPong(b *testing.B, x, y *Side) { BenchPingPongSize(b, x, y, 8) }

// BenchPingPongSize is BenchPingPong with messages of size bytes (see
// PingPongSize); it also reports MB/s of one direction.
func BenchPingPongSize(b *testing.B, x, y *Side, size int) {
	rtt := make([]time.Duration, b.N)
	for i := range rtt {
		rtt[i] = 1
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := PingPongSize(x, y, size, b.N, rtt); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2, "ns/oneway-p50")
	b.ReportMetric(float64(rtt[len(rtt)*99/100].Nanoseconds())/2, "ns/oneway-p99")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/oneway")
}

// WriteRate streams b.N RDMA WRITEs of size bytes from x to y the way
// `goverbs perf write_bw` does: up to depth requests in flight, every
// mod-th signaled (perftest's cq_mod) and the last, the send CQ polled
// between bursts, posted list at a time (1: one PostSend per request). It
// reports Mmsg/s and cpu-ns/op, the posting thread's CPU time per message
// (robust to other processes' load, which the wall clock is not).
func WriteRate(b *testing.B, x, y *Side, size, list, depth, mod int) {
	wr := make([]verbs.SendWR, list)
	for i := range wr {
		wr[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{x.MR.SGE(0, size)}, RemoteAddr: y.MR.RemoteAddr(0), RKey: y.MR.RKey()}
	}
	wc := make([]verbs.WC, 16)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := ThreadCPU()
	posted, done, toSig := 0, 0, mod
	for done < b.N {
		for posted-done < depth && posted < b.N {
			k := min(list, depth-(posted-done), b.N-posted)
			for i := range wr[:k] {
				wr[i].WRID = uint64(posted + i)
				wr[i].Flags = 0
				if toSig--; toSig == 0 || posted+i+1 == b.N {
					wr[i].Flags, toSig = verbs.SendSignaled, mod
				}
			}
			if err := x.QP.PostSend(wr[:k]); err != nil {
				b.Fatal(err)
			}
			posted += k
		}
		n, err := x.SendCQ.Poll(wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range wc[:n] {
			if err := w.Err(); err != nil {
				b.Fatal(err)
			}
			done = max(done, int(w.WRID)+1)
		}
	}
	cpu := ThreadCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchSendRecvOneGoroutine posts an 8-byte inline signaled SEND from x
// and its receive at y, and polls both CQs, in one goroutine: one
// message's work on both sides without the hand-over between two spinning
// goroutines or cache lines moving between cores, so that
// bench/callgrind.sh can count its instructions (and perf stat its
// system calls) per message.
func BenchSendRecvOneGoroutine(b *testing.B, x, y *Side) {
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, 8)}}}
	wc := make([]verbs.WC, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := y.QP.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if err := x.QP.PostSend(send); err != nil {
			b.Fatal(err)
		}
		if err := Spin(y.RecvCQ, wc); err != nil {
			b.Fatal(err)
		}
		if err := Spin(x.SendCQ, wc); err != nil {
			b.Fatal(err)
		}
	}
}
