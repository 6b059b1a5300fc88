package iwarp_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// A list posted at once leaves in one write (engine.Batcher): eight small
// requests, one writev; every one completes, in order, and arrives.
func TestListOneWrite(t *testing.T) {
	leakcheck.Check(t)
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
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
	leakcheck.Check(t)
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
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
	want := []struct {
		st verbs.WCStatus
		op verbs.WCOpcode
	}{{verbs.WCSuccess, verbs.WCRDMAWrite}, {verbs.WCSuccess, verbs.WCSend}, {verbs.WCLocProtErr, verbs.WCSend}, {verbs.WCWRFlushErr, verbs.WCSend}}
	for i, wc := range conformance.PollN(t, a.SendCQ, len(wrs)) {
		if wc.WRID != wrs[i].WRID || wc.Status != want[i].st {
			t.Fatalf("completion %d: wrid %d %v, want wrid %d %v", i, wc.WRID, wc.Status, wrs[i].WRID, want[i].st)
		}
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
	leakcheck.Check(t)
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
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
