package roce_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// TestCMConnect: Dial and Accept over the IB CM (REQ, REP, RTU) between
// two devices, private data both ways, data both ways, a reject with its
// private data, a port nobody listens on, and a disconnect that flushes
// both sides.
func TestCMConnect(t *testing.T) {
	leakcheck.Check(t)
	da, db := devices(t)
	a := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	b := conformance.NewSide(t, openDev(t, db), verbs.QPTRC, conformance.PairOpts{})
	ln, err := roce.Listen(fmt.Sprintf("%s:7400", testAddrs[1]), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		c   *roce.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		if string(r.PrivateData()[:5]) != "hello" || r.IRD() != 4 || r.ORD() != 4 {
			ch <- res{nil, fmt.Errorf("request: private data %q, IRD %d, ORD %d", r.PrivateData()[:5], r.IRD(), r.ORD())}
			return
		}
		c, err := r.Accept(b.QP, roce.Params{PrivateData: []byte("welcome"), IRD: 4, ORD: 4, RNRRetry: 7})
		ch <- res{c, err}
	}()
	ca, err := roce.Dial(ctx, fmt.Sprintf("%s:7400", testAddrs[1]), a.QP, roce.Params{PrivateData: []byte("hello"), IRD: 4, ORD: 4, RNRRetry: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	cb := r.c
	if !bytes.HasPrefix(ca.PrivateData(), []byte("welcome")) || ca.IRD() != 4 || ca.ORD() != 4 {
		t.Fatalf("dialer: private data %q, IRD %d, ORD %d", ca.PrivateData()[:8], ca.IRD(), ca.ORD())
	}
	if a.QP.State() != verbs.QPSRTS || b.QP.State() != verbs.QPSRTS {
		t.Fatalf("QPs in %v and %v", a.QP.State(), b.QP.State())
	}
	// Data both ways: a SEND each way and an RDMA READ.
	conformance.Fill(a.Buf[:100], 1)
	b.MustPostRecv(t, b.Recv(1, 0, 100))
	a.MustPostSend(t, a.Send(2, 0, 100))
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	a.MustPostSend(t, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(4096, 100)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 3, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(a.Buf[4096:4196], a.Buf[:100]) {
		t.Fatal("READ returned other data")
	}
	// A message received just before the disconnect is acknowledged
	// before the DREQ goes: the peer's SEND completes, it is not flushed.
	a.MustPostRecv(t, a.Recv(5, 0, 64))
	b.MustPostSend(t, b.Send(6, 0, 64))
	conformance.ExpectWC(t, conformance.Poll1(t, a.RecvCQ), 5, verbs.WCSuccess, verbs.WCRecv)
	// Disconnect: both sides flush.
	a.MustPostRecv(t, a.Recv(4, 0, 64))
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the peer did not see the disconnect")
	}
	if !errors.Is(cb.Err(), roce.ErrDisconnected) {
		t.Errorf("peer's connection ended with %v", cb.Err())
	}
	conformance.ExpectWC(t, conformance.Poll1(t, a.RecvCQ), 4, verbs.WCWRFlushErr, 0)
	conformance.WaitState(t, b.QP, verbs.QPSErr)
	conformance.ExpectWC(t, conformance.Poll1(t, b.SendCQ), 6, verbs.WCSuccess, verbs.WCSend)

	// A reject carries its private data.
	a2 := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	_, err = roce.Dial(ctx, fmt.Sprintf("%s:7400", testAddrs[1]), a2.QP, roce.Params{}, nil)
	var rej *cm.RejectedError
	if !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("dial to a rejecting listener: %v", err)
	}
	// Nobody listens on 7401: rejected (invalid service ID).
	a3 := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	_, err = roce.Dial(ctx, fmt.Sprintf("%s:7401", testAddrs[1]), a3.QP, roce.Params{}, nil)
	if !errors.As(err, &rej) || !errors.Is(err, cm.ErrRejected) {
		t.Fatalf("dial to a port nobody listens on: %v", err)
	}
}
