package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// end is one end of the demo's connection.
type end struct {
	ctx      *verbs.Context
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	mr       *verbs.MR
}

func newEnd(size int) (*end, error) {
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		return nil, err
	}
	e := &end{ctx: ctx}
	if e.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.scq, err = ctx.CreateCQ(1024, nil); err != nil {
		return nil, err
	}
	if e.rcq, err = ctx.CreateCQ(1024, nil); err != nil {
		return nil, err
	}
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	if err != nil {
		return nil, err
	}
	buf, err := verbs.AllocBuffer(size)
	if err != nil {
		return nil, err
	}
	e.mr, err = e.pd.RegMR(buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	return e, err
}

func (e *end) close() {
	e.qp.Destroy()
	buf := verbs.BufferOf(e.mr.Bytes())
	e.mr.Dereg()
	if buf != nil {
		buf.Free()
	}
	e.scq.Destroy()
	e.rcq.Destroy()
	e.pd.Dealloc()
	e.ctx.Close()
}

// wait polls cq until one completion arrives and returns it.
func wait(cq *verbs.CQ) verbs.WC {
	var wc [1]verbs.WC
	for {
		if n, err := cq.Poll(wc[:]); err != nil {
			panic(err)
		} else if n == 1 {
			return wc[0]
		}
	}
}

const demoHelp = `usage: goverbs demo [-n ITERS] [-D DURATION]

Walks through SEND/RECV, RDMA WRITE and READ, atomics, a remote access
error with its flush and asynchronous event, and bad_wr, between two QPs of
the in-process loop provider (device loop0), then measures them: latency
(half a round trip, -n iterations), message rate and RDMA WRITE bandwidth
(-D each) against a memcpy of the same size.
`

func demo(args []string) error {
	fs := newCommand("demo", demoHelp)
	iters := fs.IntP("iters", "n", 200000, "latency iterations")
	dur := fs.duration("duration", "D", time.Second, "duration of each bandwidth measurement: seconds (1.5) or with a unit (200ms)")
	fs.movedLetter("d", "demo's duration is -D (--duration)")
	args, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.noArgs(args); err != nil {
		return err
	}
	if *iters < 1 {
		return badUsage("demo", "-n %d: at least one iteration", *iters)
	}
	if *dur <= 0 {
		return badUsage("demo", "-D %v: a positive duration", *dur)
	}
	if err := fs.begin(); err != nil {
		return err
	}
	const size = 2 << 20
	a, err := newEnd(size)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newEnd(size)
	if err != nil {
		return err
	}
	defer b.close()
	if err := loop.Connect(a.qp, b.qp); err != nil {
		return err
	}
	fmt.Printf("goverbs demo: RC QP %#x <-> QP %#x on %s (provider loop, in-process)\n\n", a.qp.Num(), b.qp.Num(), loop.DeviceName)
	if err := walkthrough(a, b); err != nil {
		return err
	}
	fmt.Println()
	return benchmark(a, b, *iters, *dur)
}

func check(ok bool, format string, args ...any) error {
	if !ok {
		return fmt.Errorf("demo check failed: "+format, args...)
	}
	fmt.Printf("  ok  "+format+"\n", args...)
	return nil
}

func walkthrough(a, b *end) error {
	ab, bb := a.mr.Bytes(), b.mr.Bytes()
	// SEND/RECV
	copy(ab, "hello, goverbs")
	b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}})
	a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 14)}}})
	s, r := wait(a.scq), wait(b.rcq)
	if err := check(s.Status == verbs.WCSuccess && r.Status == verbs.WCSuccess && string(bb[:r.ByteLen]) == "hello, goverbs",
		"SEND/RECV: %q arrived (%d bytes, wr_id %d)", bb[:r.ByteLen], r.ByteLen, r.WRID); err != nil {
		return err
	}
	// RDMA WRITE and READ
	for i := range 4096 {
		ab[4096+i] = byte(i)
	}
	a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(4096, 4096)}, RemoteAddr: b.mr.RemoteAddr(8192), RKey: b.mr.RKey()}})
	s = wait(a.scq)
	if err := check(s.Status == verbs.WCSuccess && string(bb[8192:8192+4096]) == string(ab[4096:8192]),
		"RDMA WRITE: 4096 bytes placed at the peer's address %#x (rkey %#x), no receive consumed", b.mr.RemoteAddr(8192), b.mr.RKey()); err != nil {
		return err
	}
	a.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(16384, 4096)}, RemoteAddr: b.mr.RemoteAddr(8192), RKey: b.mr.RKey()}})
	s = wait(a.scq)
	if err := check(s.Status == verbs.WCSuccess && s.ByteLen == 4096 && string(ab[16384:16384+4096]) == string(ab[4096:8192]),
		"RDMA READ: read the 4096 bytes back (%v, byte_len %d)", s.Opcode, s.ByteLen); err != nil {
		return err
	}
	// Atomics
	a.qp.PostSend([]verbs.SendWR{
		{WRID: 5, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(24576, 8)},
			RemoteAddr: b.mr.RemoteAddr(32768), RKey: b.mr.RKey(), CompareAdd: 42},
		{WRID: 6, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(24584, 8)},
			RemoteAddr: b.mr.RemoteAddr(32768), RKey: b.mr.RKey(), CompareAdd: 42, Swap: 7},
	})
	s1, s2 := wait(a.scq), wait(a.scq)
	if err := check(s1.Status == verbs.WCSuccess && s2.Status == verbs.WCSuccess && bb[32768] == 7,
		"atomics: FETCH_AND_ADD 42 then CMP_AND_SWP 42->7 on the peer's word (now %d)", bb[32768]); err != nil {
		return err
	}
	// A remote access violation: the failing WR gets its status, the one after it is flushed,
	// the target QP goes to ERR and its owner is told asynchronously.
	a.qp.PostSend([]verbs.SendWR{
		{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: b.mr.RemoteAddr(0), RKey: b.mr.RKey() ^ 0xff},
		{WRID: 8, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}},
	})
	s1, s2 = wait(a.scq), wait(a.scq)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	ev, err := b.ctx.GetAsyncEvent(ctx)
	cancel()
	if err := check(err == nil && s1.Status == verbs.WCRemAccessErr && s2.Status == verbs.WCWRFlushErr && ev.Type == verbs.EventQPAccessErr,
		"wrong rkey: wr %d %q, wr %d %q; peer got async event %q", s1.WRID, s1.Status, s2.WRID, s2.Status, ev.Type); err != nil {
		return err
	}
	if err := check(a.qp.State() == verbs.QPSErr && b.qp.State() == verbs.QPSErr, "both QPs are in ERR; posting to a QP in ERR is refused or flushed"); err != nil {
		return err
	}
	var pe *verbs.PostError
	err = a.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}, {WRID: 10, SGList: make([]verbs.SGE, 3)}})
	if err := check(errors.As(err, &pe) && pe.Index == 1, "a list with a bad second WR: bad_wr = %d (%v)", pe.Index, pe.Err); err != nil {
		return err
	}
	wait(a.rcq) // the first receive, flushed
	// Reconnect for the benchmark.
	for _, e := range []*end{a, b} {
		e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState)
	}
	return loop.Connect(a.qp, b.qp)
}

type latency struct{ min, p50, avg, p99, p999 time.Duration }

func summarize(d []time.Duration) latency {
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return latency{d[0], at(0.5), sum / time.Duration(len(d)), at(0.99), at(0.999)}
}

// pingPong measures one-way latency as half of each round trip of an 8-byte
// message between two goroutines that busy-poll, from per-iteration timestamps.
func pingPong(a, b *end, iters int, op verbs.WROpcode) latency {
	mk := func(e, peer *end) ([]verbs.SendWR, []verbs.RecvWR) {
		return []verbs.SendWR{{Opcode: op, SGList: []verbs.SGE{e.mr.SGE(0, 8)}, RemoteAddr: peer.mr.RemoteAddr(64), RKey: peer.mr.RKey()}},
			[]verbs.RecvWR{{SGList: []verbs.SGE{e.mr.SGE(64, 8)}}}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		send, recv := mk(b, a)
		b.qp.PostRecv(recv)
		for range iters {
			wait(b.rcq)
			b.qp.PostRecv(recv)
			b.qp.PostSend(send)
		}
	}()
	send, recv := mk(a, b)
	a.qp.PostRecv(recv)
	rt := make([]time.Duration, iters)
	for i := range iters {
		t0 := time.Now()
		a.qp.PostSend(send)
		wait(a.rcq)
		rt[i] = time.Since(t0) / 2
		a.qp.PostRecv(recv)
	}
	wg.Wait()
	return summarize(rt)
}

// rate measures 8-byte SEND/RECV messages per second on one goroutine.
func rate(a, b *end, d time.Duration) float64 {
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{b.mr.SGE(0, 8)}}}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		for range 1000 {
			b.qp.PostRecv(recv)
			a.qp.PostSend(send)
			wait(a.scq)
			wait(b.rcq)
		}
		n += 1000
	}
	return float64(n) / time.Since(start).Seconds()
}

// writeBW measures RDMA WRITE bandwidth from completed bytes, with up to 64
// writes outstanding.
func writeBW(a, b *end, size int, d time.Duration) float64 {
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, size)},
		RemoteAddr: b.mr.RemoteAddr(0), RKey: b.mr.RKey()}}
	wc := make([]verbs.WC, 64)
	var done int64
	out := 0
	start := time.Now()
	for time.Since(start) < d {
		for out < 64 {
			if err := a.qp.PostSend(wr); err != nil {
				panic(err)
			}
			out++
		}
		n, _ := a.scq.Poll(wc)
		out -= n
		done += int64(n * size)
	}
	el := time.Since(start)
	for out > 0 {
		n, _ := a.scq.Poll(wc)
		out -= n
	}
	return float64(done) / el.Seconds() / 1e9
}

// memcpyBW is the machine's reference: single-threaded copy of size bytes.
func memcpyBW(size int, d time.Duration) float64 {
	src, dst := make([]byte, size), make([]byte, size)
	var done int64
	start := time.Now()
	for time.Since(start) < d {
		for range 16 {
			copy(dst, src)
		}
		done += int64(16 * size)
	}
	return float64(done) / time.Since(start).Seconds() / 1e9
}

func benchmark(a, b *end, iters int, d time.Duration) error {
	fmt.Printf("benchmark (provider loop, device %s, busy polling; latency = half round trip, per-iteration timestamps)\n\n", loop.DeviceName)
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "test\tbytes\titerations\tmin µs\tp50 µs\tavg µs\tp99 µs\tp99.9 µs\t")
	us := func(x time.Duration) string { return fmt.Sprintf("%.3f", float64(x)/1e3) }
	for _, t := range []struct {
		name string
		op   verbs.WROpcode
	}{{"send_lat", verbs.WRSend}, {"write_imm_lat", verbs.WRRDMAWriteWithImm}} {
		l := pingPong(a, b, iters, t.op)
		fmt.Fprintf(w, "%s\t8\t%d\t%s\t%s\t%s\t%s\t%s\t\n", t.name, iters, us(l.min), us(l.p50), us(l.avg), us(l.p99), us(l.p999))
	}
	w.Flush()
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "test\tbytes\tresult\tvs memcpy\t")
	fmt.Fprintf(w, "send_rate\t8\t%.2f Mmsg/s\t\t\n", rate(a, b, d)/1e6)
	for _, size := range []int{4096, 65536, 1 << 20} {
		bw := writeBW(a, b, size, d)
		mc := memcpyBW(size, d/2)
		fmt.Fprintf(w, "write_bw\t%d\t%.2f GB/s\t%.2f\t\n", size, bw, bw/mc)
	}
	return w.Flush()
}
