package iwarp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// connect connects two RC QPs over loopback TCP: a dials, b accepts.
func connect(t testing.TB, a, b *verbs.QP, pa, pb iwarp.Params) (ca, cb *iwarp.Conn) {
	t.Helper()
	ln, err := iwarp.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *iwarp.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := r.Accept(b, pb)
		ch <- res{c, err}
	}()
	ca, err = iwarp.Dial(ctx, ln.Addr().String(), a, pa, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { ca.Disconnect(); r.c.Disconnect() })
	return ca, r.c
}

func open(t testing.TB) *verbs.Context {
	ctx, err := verbs.OpenDevice(iwarp.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

func TestBasicOps(t *testing.T) {
	leakcheck.Check(t)
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	ca, cb := connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4, PrivateData: []byte("hi"), Extensions: true}, iwarp.Params{IRD: 4, ORD: 4, PrivateData: []byte("yo")})
	if string(ca.PrivateData()) != "yo" || string(cb.PrivateData()) != "hi" || !ca.Extensions() || !cb.Extensions() {
		t.Fatalf("private data %q/%q ext %v/%v", ca.PrivateData(), cb.PrivateData(), ca.Extensions(), cb.Extensions())
	}
	// SEND/RECV, 100 KiB: several FPDUs.
	n := 100 << 10
	a2 := conformance.NewSide(t, a.Ctx, verbs.QPTRC, conformance.PairOpts{BufSize: 1 << 20})
	_ = a2
	conformance.Fill(a.Buf[:60000], 5)
	b.MustPostRecv(t, b.Recv(1, 0, 65536))
	a.MustPostSend(t, a.Send(2, 0, 60000))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	wc := conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 60000 || !bytes.Equal(b.Buf[:60000], a.Buf[:60000]) {
		t.Fatalf("recv %d bytes, data equal %v", wc.ByteLen, bytes.Equal(b.Buf[:60000], a.Buf[:60000]))
	}
	_ = n
	// WRITE then READ back
	conformance.Fill(a.Buf[:30000], 9)
	a.MustPostSend(t, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 30000)},
		RemoteAddr: b.MR.RemoteAddr(1000), RKey: b.MR.RKey()})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	a.MustPostSend(t, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(32768, 30000)},
		RemoteAddr: b.MR.RemoteAddr(1000), RKey: b.MR.RKey()})
	if wc := conformance.Poll1(t, a.SendCQ); wc.Status != verbs.WCSuccess {
		time.Sleep(50 * time.Millisecond)
		t.Fatalf("read: %v; a: %v; b: %v", wc.Status, ca.Err(), cb.Err())
	}
	if !bytes.Equal(a.Buf[32768:32768+30000], a.Buf[:30000]) {
		t.Fatal("read back differs")
	}
	// atomics
	a.MustPostSend(t, verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
		RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), CompareAdd: 5})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 5, verbs.WCSuccess, verbs.WCFetchAdd)
	// write with imm
	b.MustPostRecv(t, b.Recv(6, 0, 0))
	a.MustPostSend(t, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 100)},
		RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), ImmData: 0xabcdef})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 7, verbs.WCSuccess, verbs.WCRDMAWrite)
	wc = conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 6, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if wc.ImmData != 0xabcdef || wc.ByteLen != 100 {
		t.Fatalf("imm wc %+v", wc)
	}
}

// Without the goverbs extensions (the peer may be siw, which has no RFC
// 7306), immediate data and atomics are refused at post time with
// ErrNotSupported, never sent to a peer that would terminate on them.
func TestExtensionsOnlyWhenOffered(t *testing.T) {
	leakcheck.Check(t)
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	ca, cb := connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
	if ca.Extensions() || cb.Extensions() {
		t.Fatal("extensions negotiated although the initiator did not offer them")
	}
	for _, wr := range []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
		{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
		{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
		{WRID: 4, Opcode: verbs.WRSendWithImm, SGList: []verbs.SGE{a.MR.SGE(0, 8)}},
		{WRID: 7, Opcode: verbs.WRFlush, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), FlushLen: 8, FlushType: verbs.FlushGlobal},
		{WRID: 8, Opcode: verbs.WRAtomicWrite, SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
	} {
		conformance.ExpectPostErr(t, a.QP.PostSend([]verbs.SendWR{wr}), 0, verbs.ErrNotSupported)
	}
	// Plain operations still work on the connection.
	b.MustPostRecv(t, b.Recv(5, 0, 64))
	a.MustPostSend(t, a.Send(6, 0, 8))
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 5, verbs.WCSuccess, verbs.WCRecv)
}

// A responder whose initiator stays silent keeps MPA's start-up rule for a
// while (nothing goes out before the initiator's first FPDU could have come)
// and then transmits anyway: perftest's write_lat server writes first.
func TestResponderSpeaksFirst(t *testing.T) {
	leakcheck.Check(t)
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
	a.MustPostRecv(t, a.Recv(1, 0, 64))
	conformance.Fill(b.Buf[:64], 3)
	t0 := time.Now()
	b.MustPostSend(t, b.Send(2, 0, 64))
	time.Sleep(20 * time.Millisecond)
	if time.Since(t0) < 100*time.Millisecond {
		conformance.ExpectEmpty(t, b.SendCQ)
		conformance.ExpectEmpty(t, a.RecvCQ)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, b.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	wc := conformance.Poll1(t, a.RecvCQ)
	conformance.ExpectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 64 || !bytes.Equal(a.Buf[:64], b.Buf[:64]) {
		t.Fatalf("received %d bytes, equal %v", wc.ByteLen, bytes.Equal(a.Buf[:64], b.Buf[:64]))
	}
}

// TestLargeWriteBackpressure: an RDMA WRITE of 16 MiB is 256 FPDUs, so
// more than one batch of iovecs, and far more than the socket takes at
// once while the target does not read: the writer must resume after
// partial writes and waits for room, and every byte must land in order.
func TestLargeWriteBackpressure(t *testing.T) {
	leakcheck.Check(t)
	const n = 16 << 20
	a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: n})
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: n + 4096})
	connect(t, a.QP, b.QP, iwarp.Params{IRD: 4, ORD: 4}, iwarp.Params{IRD: 4, ORD: 4})
	conformance.Fill(a.Buf[:n], 11)
	b.MustPostRecv(t, b.Recv(1, 0, 0))
	a.MustPostSend(t,
		verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, n)}, RemoteAddr: b.MR.RemoteAddr(4096), RKey: b.MR.RKey()},
		verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 3, verbs.WCSuccess, verbs.WCSend)
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
	if !bytes.Equal(b.Buf[4096:4096+n], a.Buf[:n]) {
		i := 0
		for i < n && b.Buf[4096+i] == a.Buf[i] {
			i++
		}
		t.Fatalf("written data differs from byte %d", i)
	}
}
