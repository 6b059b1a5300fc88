package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// TestCMNoRTU: a peer that sends a REQ and never answers the REP (no
// RTU) gets the REP as many times as its REQ's Max CM Retries allow, each
// after its Local CM Response Timeout, then a REJ (timeout); the Accept
// fails, its QP goes to ERR flushing its receive, and the device counts
// the dropped exchange. The listener serves a real client meanwhile.
func TestCMNoRTU(t *testing.T) {
	leakcheck.Check(t)
	da, db := devices(t)
	const port = 7411
	addr := fmt.Sprintf("%s:%d", testAddrs[1], port)
	ln, err := roce.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// The half-open peer: its own address, port 4791, where the REPs come.
	b := testAddrs[0].As4()
	from := netip.AddrFrom4([4]byte{127, b[1], b[2], 7})
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, ib.UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if rc, err := uc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
	}
	h := &hostile{c: uc, from: from, to: testAddrs[1], sport: ib.UDPPort}

	srv := conformance.NewSide(t, openDev(t, db), verbs.QPTRC, conformance.PairOpts{})
	half := conformance.NewSide(t, openDev(t, db), verbs.QPTRC, conformance.PairOpts{})
	if err := conformance.ToInit(half.QP, verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	half.MustPostRecv(t, half.Recv(9, 0, 64))
	before, _ := roce.DeviceCounters(db)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type accepted struct {
		c    *roce.Conn
		err  error
		real bool
		took time.Duration
	}
	results := make(chan accepted, 2)
	go func() {
		for range 2 {
			r, err := ln.Accept(ctx)
			if err != nil {
				results <- accepted{err: err}
				return
			}
			real := bytes.HasPrefix(r.PrivateData(), []byte("real"))
			qp := half.QP
			if real {
				qp = srv.QP
			}
			go func() { // the half-open exchange must not hold the real one up
				start := time.Now()
				c, err := r.Accept(qp, roce.Params{RNRRetry: 7})
				results <- accepted{c, err, real, time.Since(start)}
			}()
		}
	}()

	const respTimeout, retries = 16, 2 // 4.096 µs × 2^16 ≈ 268 ms, 3 REPs in all
	req := ib.REQ{LocalCommID: 0x5eed, ServiceID: ib.ServiceID(ib.PortSpaceTCP, port), LocalCAGUID: 0x77,
		LocalQPN: 0x1234, ResponderResources: 1, InitiatorDepth: 1, RemoteCMRespTimeout: 20, StartingPSN: 100,
		LocalCMRespTimeout: respTimeout, RetryCount: 7, PKey: ib.DefaultPKey, PathMTU: uint8(verbs.MTU1024),
		RNRRetryCount: 7, MaxCMRetries: retries, LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
		LocalGID: ib.GIDOf(from), RemoteGID: ib.GIDOf(testAddrs[1]), HopLimit: 64, LocalAckTimeout: 14}
	ib.PutCMAHdr(req.PrivateData[:], from, testAddrs[1], 40000)
	var m [ib.MADLen]byte
	req.Marshal(m[:], 0xabcdef)
	var bb ib.Builder
	bb.H = make([]byte, 0, 512)
	bb.BTH(ib.UDSendOnly, false, 0, ib.DefaultPKey, ib.GSIQPN, false, 1)
	bb.DETH(ib.GSIQKey, ib.GSIQPN)
	h.write(t, append(bb.H, m[:]...), false)

	// A real client is served while the exchange waits for its RTU.
	cli := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	cc, err := roce.Dial(ctx, addr, cli.QP, roce.Params{PrivateData: []byte("real"), RNRRetry: 7})
	if err != nil {
		t.Fatal(err)
	}
	var sc *roce.Conn
	var halfRes accepted
	servedFirst := false
	for range 2 {
		r := <-results
		if !r.real {
			halfRes = r
			continue
		}
		if r.err != nil {
			t.Fatalf("the real client's Accept: %v", r.err)
		}
		sc, servedFirst = r.c, halfRes.err == nil
		conformance.Fill(cli.Buf[:64], 5)
		srv.MustPostRecv(t, srv.Recv(1, 0, 64))
		cli.MustPostSend(t, cli.Send(2, 0, 64))
		conformance.ExpectWC(t, conformance.Poll1(t, srv.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
		conformance.ExpectWC(t, conformance.Poll1(t, cli.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
		if !bytes.Equal(srv.Buf[:64], cli.Buf[:64]) {
			t.Fatal("the SEND arrived changed")
		}
	}
	if halfRes.c != nil || !errors.Is(halfRes.err, cm.ErrUnreachable) {
		t.Fatalf("Accept of a REQ never followed by an RTU: %v, %v", halfRes.c, halfRes.err)
	}
	gap := 4096 * time.Nanosecond << respTimeout
	if halfRes.took < (retries+1)*gap {
		t.Errorf("Accept gave up after %v, before the REQ's %d × %v", halfRes.took, retries+1, gap)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, half.RecvCQ), 9, verbs.WCWRFlushErr, 0)
	if st := half.QP.State(); st != verbs.QPSErr {
		t.Errorf("the QP of the dropped exchange is in %v", st)
	}
	after, _ := roce.DeviceCounters(db)
	if n := after.CMTimeout - before.CMTimeout; n != 1 {
		t.Errorf("CMTimeout counted %d, want 1", n)
	}

	// What the half-open peer got: the REP, retries+1 times, then a REJ.
	var reps int
	var rej []byte
	buf := make([]byte, 2048)
	for rej == nil {
		uc.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := uc.Read(buf)
		if err != nil {
			t.Fatalf("after %d REPs, no REJ: %v", reps, err)
		}
		if n < ib.BTHLen+ib.DETHLen+ib.MADLen {
			continue
		}
		mad := buf[ib.BTHLen+ib.DETHLen : ib.BTHLen+ib.DETHLen+ib.MADLen]
		switch ib.MAD(mad).AttrID() {
		case ib.AttrREP:
			reps++
		case ib.AttrREJ:
			rej = append([]byte(nil), mad...)
		}
	}
	if reps != retries+1 {
		t.Errorf("%d REPs, want %d (the REQ's Max CM Retries + 1)", reps, retries+1)
	}
	if _, reason := ib.REJReason(rej); reason != ib.RejTimeout {
		t.Errorf("REJ reason %d, want %d (timeout)", reason, ib.RejTimeout)
	}
	if ari := ib.REJInfo(rej); len(ari) != 8 || binary.BigEndian.Uint64(ari) == 0 {
		t.Errorf("REJ (timeout) additional information % x, want the CA GUID", ari)
	}
	if err := cc.Disconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the listener's side did not see the disconnect")
	}
	t.Logf("dropped after %v: %v (the real client served before: %v)", halfRes.took.Round(time.Millisecond), halfRes.err, servedFirst)
}

// TestCMDialNoAnswer: a Dial whose REQs nobody answers ends at its
// deadline, and the device counts the dropped exchange.
func TestCMDialNoAnswer(t *testing.T) {
	leakcheck.Check(t)
	da, _ := devices(t)
	cli := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	b := testAddrs[0].As4()
	nobody := netip.AddrFrom4([4]byte{127, b[1], b[2], 8}) // no device, no socket on 4791
	before, _ := roce.DeviceCounters(da)
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	_, err := roce.Dial(ctx, fmt.Sprintf("%s:7412", nobody), cli.QP, roce.Params{})
	if !errors.Is(err, cm.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to nobody: %v", err)
	}
	after, _ := roce.DeviceCounters(da)
	if n := after.CMTimeout - before.CMTimeout; n != 1 {
		t.Errorf("CMTimeout counted %d, want 1", n)
	}
}
