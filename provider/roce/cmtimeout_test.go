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

// TestCMNoRTU: peers that send a REQ and never answer the REP (no RTU),
// 32 at once, each get the REP as many times as its REQ's Max CM Retries
// allow, each after its Local CM Response Timeout, then a REJ (timeout);
// each Accept fails, its QP goes to ERR flushing its receive, and the
// device counts each dropped exchange. The listener serves a real client
// meanwhile.
func TestCMNoRTU(t *testing.T) {
	leakcheck.Check(t)
	da, db := devices(t)
	const (
		port        = 7411
		halfOpen    = 32 // within the listener's backlog
		respTimeout = 16 // 4.096 µs × 2^16 ≈ 268 ms
		retries     = 2  // 3 REPs in all
	)
	addr := fmt.Sprintf("%s:%d", testAddrs[1], port)
	ln, err := roce.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// The half-open peers: an address of their own, port 4791, where the
	// REPs come.
	b := testAddrs[0].As4()
	from := netip.AddrFrom4([4]byte{127, b[1], b[2], 7})
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, ib.UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	uc.SetReadBuffer(1 << 20)
	if rc, err := uc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
	}
	h := &hostile{c: uc, from: from, to: testAddrs[1], sport: ib.UDPPort}

	sctx := openDev(t, db)
	srv := conformance.NewSide(t, sctx, verbs.QPTRC, conformance.PairOpts{})
	halves := map[uint32]*conformance.Side{} // by the REQ's comm ID
	byQP := map[*verbs.QP]uint32{}
	for i := range uint32(halfOpen) {
		s := conformance.NewSide(t, sctx, verbs.QPTRC, conformance.PairOpts{SharedCQ: true, CQE: 4})
		if err := conformance.ToInit(s.QP, verbs.AccessRemoteWrite); err != nil {
			t.Fatal(err)
		}
		s.MustPostRecv(t, s.Recv(9, 0, 64))
		halves[0x5eed00+i] = s
		byQP[s.QP] = 0x5eed00 + i
	}
	before, _ := roce.DeviceCounters(db)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type accepted struct {
		c    *roce.Conn
		err  error
		qp   *verbs.QP
		took time.Duration
	}
	results := make(chan accepted, halfOpen+1)
	go func() {
		for range halfOpen + 1 {
			r, err := ln.Accept(ctx)
			if err != nil {
				results <- accepted{err: err}
				return
			}
			qp := srv.QP
			if !bytes.HasPrefix(r.PrivateData(), []byte("real")) {
				// The request names its half-open peer in its private data.
				qp = halves[binary.BigEndian.Uint32(r.PrivateData())].QP
			}
			go func() { // each Accept on its own: none holds another up
				start := time.Now()
				c, err := r.Accept(qp, roce.Params{RNRRetry: 7})
				results <- accepted{c, err, qp, time.Since(start)}
			}()
		}
	}()

	var bb ib.Builder
	for id := range halves {
		req := ib.REQ{LocalCommID: id, ServiceID: ib.ServiceID(ib.PortSpaceTCP, port), LocalCAGUID: 0x77,
			LocalQPN: id & 0xFFFFFF, ResponderResources: 1, InitiatorDepth: 1, RemoteCMRespTimeout: 20, StartingPSN: 100,
			LocalCMRespTimeout: respTimeout, RetryCount: 7, PKey: ib.DefaultPKey, PathMTU: uint8(verbs.MTU1024),
			RNRRetryCount: 7, MaxCMRetries: retries, LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
			LocalGID: ib.GIDOf(from), RemoteGID: ib.GIDOf(testAddrs[1]), HopLimit: 64, LocalAckTimeout: 14}
		ib.PutCMAHdr(req.PrivateData[:], from, testAddrs[1], uint16(40000+id&0xFF))
		binary.BigEndian.PutUint32(req.PrivateData[ib.CMAHdrLen:], id)
		var m [ib.MADLen]byte
		req.Marshal(m[:], uint64(id)<<8)
		bb.H = make([]byte, 0, 512)
		bb.BTH(ib.UDSendOnly, false, 0, ib.DefaultPKey, ib.GSIQPN, false, 1)
		bb.DETH(ib.GSIQKey, ib.GSIQPN)
		h.write(t, append(bb.H, m[:]...), false)
	}

	// A real client is served while the exchanges wait for their RTUs.
	cli := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	cc, err := roce.Dial(ctx, addr, cli.QP, roce.Params{PrivateData: []byte("real"), RNRRetry: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sc *roce.Conn
	droppedBefore := 0 // half-open exchanges dropped before the real one was accepted
	gap := 4096 * time.Nanosecond << respTimeout
	var worst time.Duration
	for range halfOpen + 1 {
		r := <-results
		if r.qp != srv.QP {
			if r.c != nil || !errors.Is(r.err, cm.ErrUnreachable) {
				t.Fatalf("Accept of a REQ never followed by an RTU: %v, %v", r.c, r.err)
			}
			if r.took < (retries+1)*gap {
				t.Errorf("Accept gave up after %v, before the REQ's %d × %v", r.took, retries+1, gap)
			}
			worst = max(worst, r.took)
			if sc == nil {
				droppedBefore++
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("the real client's Accept: %v", r.err)
		}
		sc = r.c
		conformance.Fill(cli.Buf[:64], 5)
		srv.MustPostRecv(t, srv.Recv(1, 0, 64))
		cli.MustPostSend(t, cli.Send(2, 0, 64))
		conformance.ExpectWC(t, conformance.Poll1(t, srv.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
		conformance.ExpectWC(t, conformance.Poll1(t, cli.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
		if !bytes.Equal(srv.Buf[:64], cli.Buf[:64]) {
			t.Fatal("the SEND arrived changed")
		}
	}
	for _, s := range halves {
		conformance.ExpectWC(t, conformance.Poll1(t, s.RecvCQ), 9, verbs.WCWRFlushErr, 0)
		if st := s.QP.State(); st != verbs.QPSErr {
			t.Errorf("the QP of a dropped exchange is in %v", st)
		}
	}
	after, _ := roce.DeviceCounters(db)
	if n := after.CMTimeout - before.CMTimeout; n != halfOpen {
		t.Errorf("CMTimeout counted %d, want %d", n, halfOpen)
	}

	// What the half-open peers got: the REP, retries+1 times, then a REJ.
	reps := map[uint32]int{}
	rejs := map[uint32]int{}
	buf := make([]byte, 2048)
	for len(rejs) < halfOpen {
		uc.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := uc.Read(buf)
		if err != nil {
			t.Fatalf("REJs for %d of %d exchanges: %v", len(rejs), halfOpen, err)
		}
		if n < ib.BTHLen+ib.DETHLen+ib.MADLen {
			continue
		}
		mad := buf[ib.BTHLen+ib.DETHLen : ib.BTHLen+ib.DETHLen+ib.MADLen]
		_, id := ib.CommIDs(mad)
		switch ib.MAD(mad).AttrID() {
		case ib.AttrREP:
			reps[id]++
		case ib.AttrREJ:
			rejs[id]++
			if _, reason := ib.REJReason(mad); reason != ib.RejTimeout {
				t.Errorf("REJ reason %d, want %d (timeout)", reason, ib.RejTimeout)
			}
			if ari := ib.REJInfo(mad); len(ari) != 8 || binary.BigEndian.Uint64(ari) == 0 {
				t.Errorf("REJ (timeout) additional information % x, want the CA GUID", ari)
			}
		}
	}
	for id := range halves {
		if reps[id] != retries+1 || rejs[id] != 1 {
			t.Errorf("exchange %#x: %d REPs and %d REJs, want %d and 1", id, reps[id], rejs[id], retries+1)
		}
	}
	if err := cc.Disconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the listener's side did not see the disconnect")
	}
	t.Logf("%d half-open exchanges dropped, the last after %v; %d of them before the real client was served",
		halfOpen, worst.Round(time.Millisecond), droppedBefore)
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
	_, err := roce.Dial(ctx, fmt.Sprintf("%s:7412", nobody), cli.QP, roce.Params{}, nil)
	if !errors.Is(err, cm.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to nobody: %v", err)
	}
	after, _ := roce.DeviceCounters(da)
	if n := after.CMTimeout - before.CMTimeout; n != 1 {
		t.Errorf("CMTimeout counted %d, want 1", n)
	}
}
