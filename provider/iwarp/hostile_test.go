package iwarp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// Hundreds of connections that never finish MPA negotiation (silent, or
// sending their Request a byte at a time) hold a listener's resources only
// until its AcceptTimeout, and a legitimate client is served meanwhile, at
// once.
func TestSilentAndSlowInitiatorsDoNotBlockOthers(t *testing.T) {
	leakcheck.Check(t)
	const silent, slow = 400, 50
	ln, err := iwarp.Listen("127.0.0.1:0", &iwarp.Config{AcceptTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g0 := runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range silent {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	defer close(stop)
	for range slow {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() { // slowloris: a byte of the Request every 300 ms, in all longer than AcceptTimeout
			for _, b := range []byte(wire.MPAKeyRequest) {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
			}
		}()
	}
	// A legitimate client connects while they all wait.
	ctx := open(t)
	a, b := conformance.NewSide(t, ctx, verbs.QPTRC, conformance.PairOpts{}), conformance.NewSide(t, ctx, verbs.QPTRC, conformance.PairOpts{})
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		r, err := ln.Accept(dctx)
		if err == nil {
			var c *iwarp.Conn
			if c, err = r.Accept(b.QP, iwarp.Params{}); err == nil {
				defer c.Disconnect()
				<-dctx.Done()
			}
		}
		accepted <- err
	}()
	c, err := iwarp.Dial(dctx, ln.Addr().String(), a.QP, iwarp.Params{}, nil)
	if err != nil {
		t.Fatalf("a legitimate client was not served within 1 s while %d connections stalled: %v", silent+slow, err)
	}
	c.Disconnect()
	cancel()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	// Each stalled connection costs the listener a goroutine at most, and
	// only until its timeout.
	if g := runtime.NumGoroutine() - g0; g > 2*(silent+slow) {
		t.Fatalf("%d goroutines for %d stalled connections", g, silent+slow)
	}
	// Silent or slow, each is dropped once AcceptTimeout has passed since
	// it connected, however it trickles.
	deadline := time.Now().Add(10 * time.Second)
	for i, c := range conns {
		c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("stalled initiator %d got data instead of being dropped", i)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("stalled initiator %d (silent: %v) was not dropped after AcceptTimeout", i, i < silent)
		}
	}
}

// TestMaximalIRDORDOffer: an initiator that offers the largest IRD and ORD
// MPA v2 can carry (16,383 each) to an application that asks for even more
// gets at most the device's 128, and its Read Requests beyond what goverbs
// granted end in a Terminate instead of a queue that grows with the offer.
// The peer never reads the responses, so they pile up as they would with a
// hostile reader.
func TestMaximalIRDORDOffer(t *testing.T) {
	leakcheck.Check(t)
	const size = 1 << 20
	r := startResponder(t, respOpts{ird: wire.MPAMaxIRDORD, ord: wire.MPAMaxIRDORD,
		accept: iwarp.Params{IRD: 1 << 20, ORD: 1 << 20}, pairOpts: conformance.PairOpts{BufSize: size}})
	if r.reply.IRD > 128 || r.reply.ORD > 128 {
		t.Fatalf("MPA Reply grants IRD %d ORD %d, want at most 128", r.reply.IRD, r.reply.ORD)
	}
	if ird := r.conn.IRD(); ird > 128 || ird < 1 {
		t.Fatalf("negotiated IRD %d, want 1..128", ird)
	}
	s := r.side
	var reqs [][]byte
	for msn := range uint32(wire.MPAMaxIRDORD) {
		reqs = append(reqs, fin(readReqMsg(msn+1, wire.ReadRequestFields{SinkSTag: 0x1234, Size: size,
			SrcSTag: s.MR.RKey(), SrcTO: s.MR.RemoteAddr(0)}), r.raw.crc))
	}
	wrote := make(chan error, 1)
	go func() {
		r.raw.nc.SetWriteDeadline(time.Now().Add(guard))
		_, err := r.raw.nc.Write(bytes.Join(reqs, nil))
		wrote <- err // goverbs may close before it took everything
	}()
	// Read what goverbs sends (Read Responses, then the Terminate).
	responses := 0
	for {
		f, err := r.raw.readFPDU()
		if err != nil {
			t.Fatalf("after %d Read Responses, no Terminate: %v", responses, err)
		}
		h := wire.Header(f[:wire.MPALenLen+int(binary.BigEndian.Uint16(f))])
		if h.Opcode() == wire.OpTerminate {
			info, err := wire.ParseTerminate(h)
			if err != nil {
				t.Fatal(err)
			}
			want := wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPCatastrophicStream)
			if info.RFC.Cause != want {
				t.Fatalf("Terminate cause %v, want %v (more Read Requests than IRD)", info.RFC.Cause, want)
			}
			break
		}
		if h.Opcode() == wire.OpReadResponse && h.Last() {
			responses++
		}
	}
	if responses >= wire.MPAMaxIRDORD {
		t.Fatalf("goverbs answered all %d Read Requests of an IRD-%d connection", responses, r.conn.IRD())
	}
	r.raw.nc.Close()
	<-wrote
	waitDone(t, r.conn)
	conformance.WaitState(t, s.QP, verbs.QPSErr)
	t.Logf("negotiated IRD %d; %d of %d Read Responses sent before the Terminate", r.conn.IRD(), responses, wire.MPAMaxIRDORD)
}
