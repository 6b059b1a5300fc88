package iwarp_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// pair connects two QPs with buffers as o says, leak-checked.
func pair(t *testing.T, o conformance.PairOpts) (a, b *conformance.Side) {
	leakcheck.Check(t)
	a = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	b = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
	return a, b
}

// A list posted at once leaves in one write (engine.Batcher): eight small
// requests, one writev; every one completes, in order, and arrives.
func TestListOneWrite(t *testing.T) {
	a, b := pair(t, conformance.PairOpts{})
	conformance.Fill(a.Buf[:8192], 21)
	var wrs []verbs.SendWR
	for i := range 7 {
		b.MustPostRecv(t, b.Recv(uint64(100+i), i*64, 64))
		wrs = append(wrs, a.Send(uint64(i), i*64, 64))
	}
	wrs = append(wrs[:3], append([]verbs.SendWR{{WRID: 50, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(4096, 1000)}, RemoteAddr: b.MR.RemoteAddr(8192), RKey: b.MR.RKey()}}, wrs[3:]...)...)
	before := iwarp.Puts(a.QP)
	a.MustPostSend(t, wrs...)
	for i, wc := range conformance.PollN(t, a.SendCQ, len(wrs)) {
		conformance.ExpectWC(t, wc, wrs[i].WRID, verbs.WCSuccess, wrs[i].Opcode.WCOpcode())
	}
	if n := iwarp.Puts(a.QP) - before; n != 1 {
		t.Errorf("a list of %d requests took %d writes, want 1", len(wrs), n)
	}
	for i, wc := range conformance.PollN(t, b.RecvCQ, 7) {
		conformance.ExpectWC(t, wc, uint64(100+i), verbs.WCSuccess, verbs.WCRecv)
	}
	if !bytes.Equal(b.Buf[:7*64], a.Buf[:7*64]) || !bytes.Equal(b.Buf[8192:8192+1000], a.Buf[4096:4096+1000]) {
		t.Fatal("data differs")
	}
}

// A request that fails before it goes out (a bad local key) does not take
// the requests before it, kept back for the same write, down with it: they
// go out and succeed, it fails, the ones after it are flushed.
func TestListBadKeyAfterKept(t *testing.T) {
	a, b := pair(t, conformance.PairOpts{})
	conformance.Fill(a.Buf[:4096], 22)
	b.MustPostRecv(t, b.Recv(10, 0, 64), b.Recv(11, 64, 64))
	bad := a.Send(3, 0, 64)
	bad.SGList[0].LKey ^= 0x5a5a00
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(1024, 500)},
			RemoteAddr: b.MR.RemoteAddr(2048), RKey: b.MR.RKey()},
		a.Send(2, 0, 64),
		bad,
		a.Send(4, 64, 64),
	}
	a.MustPostSend(t, wrs...)
	want := []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess, verbs.WCLocProtErr, verbs.WCWRFlushErr}
	for i, wc := range conformance.PollN(t, a.SendCQ, len(wrs)) {
		conformance.ExpectWC(t, wc, wrs[i].WRID, want[i], wrs[i].Opcode.WCOpcode())
	}
	wc := conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 10, verbs.WCSuccess, verbs.WCRecv)
	if !bytes.Equal(b.Buf[:64], a.Buf[:64]) || !bytes.Equal(b.Buf[2048:2048+500], a.Buf[1024:1024+500]) {
		t.Fatal("the requests before the bad one did not arrive whole")
	}
}

// When the request after one kept back cannot go after all (here the QP
// is moved to SQD while the first is being laid out), the engine flushes
// the batch: the kept request goes out and completes, the SQ drains, and
// the rest go once the QP is back in RTS.
func TestKeptWrittenWhenNextCannotGo(t *testing.T) {
	a, b := pair(t, conformance.PairOpts{})
	conformance.Fill(a.Buf[:4096], 23)
	for i := range 3 {
		b.MustPostRecv(t, b.Recv(uint64(10+i), i*64, 64))
	}
	var once sync.Once
	var merr error
	iwarp.SetKeptHook(func() {
		once.Do(func() { merr = a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSSQD}, verbs.QPAttrState) })
	})
	defer iwarp.SetKeptHook(nil)
	a.MustPostSend(t, a.Send(1, 0, 64), a.Send(2, 64, 64), a.Send(3, 128, 64))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 10, verbs.WCSuccess, verbs.WCRecv)
	if merr != nil {
		t.Fatalf("RTS -> SQD: %v", merr)
	}
	time.Sleep(20 * time.Millisecond)
	conformance.ExpectEmpty(t, a.SendCQ) // SQD: the others wait
	iwarp.SetKeptHook(nil)
	if err := a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState); err != nil {
		t.Fatalf("SQD -> RTS: %v", err)
	}
	for i, wc := range conformance.PollN(t, a.SendCQ, 2) {
		conformance.ExpectWC(t, wc, uint64(2+i), verbs.WCSuccess, verbs.WCSend)
	}
	for i, wc := range conformance.PollN(t, b.RecvCQ, 2) {
		conformance.ExpectWC(t, wc, uint64(11+i), verbs.WCSuccess, verbs.WCRecv)
	}
	if !bytes.Equal(b.Buf[:192], a.Buf[:192]) {
		t.Fatal("data differs")
	}
}

// Lists of WRITE, SEND and READ, batched, while the peer reads from us all
// along (our responses go out between our batches, from the receive side
// or the transmit goroutine): every request completes, in order, and every
// byte lands where it should. Run with -race this also checks the stream's
// lock, held across the engine's Sends of a batch.
func TestBatchesWithResponses(t *testing.T) {
	const lists, slot = 1000, 512
	cp := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: lists + 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	a, b := pair(t, conformance.PairOpts{BufSize: 1 << 20, Cap: cp, CQE: 1024})
	conformance.Fill(a.Buf, 24)
	conformance.Fill(b.Buf[lists*slot:], 25)
	for i := range lists {
		b.MustPostRecv(t, b.Recv(uint64(i), lists*slot+i*8, 8))
	}
	// An FPDU from a first: b, the MPA responder, may then send at once.
	a.MustPostSend(t, verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 9, verbs.WCSuccess, verbs.WCRDMAWrite)
	// b reads a's first 4 KiB over and over until a is done.
	stop := make(chan struct{})
	reads := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		n := 0
		defer func() { t.Logf("%d reads by the peer", n) }()
		for {
			select {
			case <-stop:
				reads <- nil
				return
			default:
			}
			if err := b.QP.PostSend([]verbs.SendWR{{WRID: 1 << 40, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{b.MR.SGE(1<<20-4096, 4096)}, RemoteAddr: a.MR.RemoteAddr(0), RKey: a.MR.RKey()}}); err != nil {
				reads <- err
				return
			}
			var wcs [1]verbs.WC
			for deadline := time.Now().Add(conformance.WaitTimeout); ; { // spin: many reads while a sends
				if k, _ := b.SendCQ.Poll(wcs[:]); k == 1 {
					break
				}
				if time.Now().After(deadline) {
					reads <- fmt.Errorf("read %d: no completion", n)
					return
				}
			}
			if wc := wcs[0]; wc.Status != verbs.WCSuccess || !bytes.Equal(b.Buf[1<<20-4096:], a.Buf[:4096]) {
				reads <- fmt.Errorf("read %d: %v, data equal %v", n, wc.Status, bytes.Equal(b.Buf[1<<20-4096:], a.Buf[:4096]))
				return
			}
			if n++; n == 1 {
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case err := <-reads:
		t.Fatal(err)
	}
	var want []uint64
	out := 0
	for i := range lists {
		size := 1 + i*37%slot
		wrs := []verbs.SendWR{
			{WRID: uint64(i)<<4 | 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(8192+i, size)},
				RemoteAddr: b.MR.RemoteAddr(i * slot), RKey: b.MR.RKey()},
			{WRID: uint64(i)<<4 | 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: fmt.Appendf(nil, "%08d", i)},
		}
		if i%7 == 0 {
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i)<<4 | 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(1<<20-slot, 64)}, RemoteAddr: b.MR.RemoteAddr(lists*slot + 8*lists), RKey: b.MR.RKey()})
		}
		for out+len(wrs) > cp.MaxSendWR {
			wc := conformance.Poll1(t, a.SendCQ)
			if wc.Status != verbs.WCSuccess || wc.WRID != want[0] {
				t.Fatalf("completion wrid %#x %v, want %#x success", wc.WRID, wc.Status, want[0])
			}
			want, out = want[1:], out-1
		}
		a.MustPostSend(t, wrs...)
		for _, wr := range wrs {
			want = append(want, wr.WRID)
		}
		out += len(wrs)
	}
	for _, wc := range conformance.PollN(t, a.SendCQ, out) {
		if wc.Status != verbs.WCSuccess || wc.WRID != want[0] {
			t.Fatalf("completion wrid %#x %v, want %#x success", wc.WRID, wc.Status, want[0])
		}
		want = want[1:]
	}
	for i, wc := range conformance.PollN(t, b.RecvCQ, lists) {
		conformance.ExpectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRecv)
		if got := string(b.Buf[lists*slot+i*8 : lists*slot+i*8+8]); got != fmt.Sprintf("%08d", i) {
			t.Fatalf("message %d carried %q", i, got)
		}
		size := 1 + i*37%slot
		if !bytes.Equal(b.Buf[i*slot:i*slot+size], a.Buf[8192+i:8192+i+size]) {
			t.Fatalf("write %d (%d bytes) differs", i, size)
		}
	}
	if !bytes.Equal(a.Buf[1<<20-slot:1<<20-slot+64], b.Buf[lists*slot+8*lists:lists*slot+8*lists+64]) {
		t.Fatal("read data differs")
	}
	close(stop)
	if err := <-reads; err != nil {
		t.Fatal(err)
	}
}
