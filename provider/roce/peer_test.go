package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// A scripted peer: a UDP socket on port 4791 of a loopback address with no
// goverbs device, to which a goverbs RC QP is connected. The test plays the
// other end packet by packet, as Linux rxe sends them (its retransmission
// rules, its READ retries from a mid-message PSN), and reads what goverbs
// answers: the IB transport's rules against a peer that is not goverbs.
type peer struct {
	t    *testing.T
	c    *net.UDPConn
	addr netip.Addr // the peer's
	to   netip.Addr // goverbs' device
	qpn  uint32     // the goverbs QP
	crc  ib.Scratch
	x    *conformance.Side
	rpsn uint32 // the PSN of the peer's next request
	buf  [9000]byte
	pkt  ib.Packet
}

const peerQPN = 0x4242 // the peer's QP number (never looked up)

// peerAddr is a third loopback address of this process's own, no device's.
var peerAddr = func() netip.Addr {
	a := testAddrs[0].As4()
	a[3] = 3
	return netip.AddrFrom4(a)
}()

// newPeer connects a new goverbs RC QP on the first test device to a
// scripted peer; the goverbs side's PSNs start at spsn, the peer's at
// rpsn, with ACK timeout t (4.096 µs × 2^t).
func newPeer(t *testing.T, spsn, rpsn uint32, timeout uint8) *peer {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, ib.UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// IP ID 0 and DF, which the ICRC of a received packet is checked as.
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
	}
	ca, _ := fixture{}.Open(t)
	o := conformance.PairOpts{BufSize: 256 << 10, CQE: 256, NoConnect: true,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}
	x := conformance.NewSide(t, ca, verbs.QPTRC, o)
	gid := verbs.GID(netip.AddrFrom16(peerAddr.As16()).As16())
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: peerQPN, RQPSN: rpsn, MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AHAttr: verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: spsn, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, st := range steps {
		if err := x.QP.Modify(&st.a, st.m); err != nil {
			t.Fatal(err)
		}
	}
	return &peer{t: t, c: c, addr: peerAddr, to: testAddrs[0], qpn: x.QP.Num(), x: x, rpsn: rpsn}
}

// send sends one packet: BTH of op for psn, then ext (extension headers)
// and payload, with its ICRC.
func (p *peer) send(op ib.Opcode, psn uint32, ackReq bool, ext, payload []byte) {
	p.t.Helper()
	pad := ib.Pad(len(payload))
	pkt := make([]byte, ib.BTHLen, ib.BTHLen+len(ext)+len(payload)+pad+ib.ICRCLen)
	ib.PutBTH(pkt, op, false, pad, 0xFFFF, p.qpn, ackReq, psn)
	pkt = append(pkt, ext...)
	pkt = append(pkt, payload...)
	pkt = append(pkt, make([]byte, pad)...)
	crc := p.crc.V4(p.addr.As4(), p.to.As4(), ib.UDPPort, ib.UDPPort, 0, true, pkt)
	pkt = binary.LittleEndian.AppendUint32(pkt, crc)
	if _, err := p.c.WriteToUDPAddrPort(pkt, netip.AddrPortFrom(p.to, ib.UDPPort)); err != nil {
		p.t.Fatal(err)
	}
}

// reth is an RDMA extended transport header.
func reth(va uint64, rkey, n uint32) []byte {
	b := binary.BigEndian.AppendUint64(nil, va)
	b = binary.BigEndian.AppendUint32(b, rkey)
	return binary.BigEndian.AppendUint32(b, n)
}

// aeth is an ACK extended transport header.
func aeth(syndrome uint8, msn uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(syndrome)<<24|msn&0xFFFFFF)
}

// recv returns the next packet goverbs sends the peer, or nil after d.
func (p *peer) recv(d time.Duration) *ib.Packet {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(d))
	n, from, err := p.c.ReadFromUDPAddrPort(p.buf[:])
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		p.t.Fatal(err)
	}
	if n < ib.BTHLen+ib.ICRCLen {
		p.t.Fatalf("a %d-byte datagram", n)
	}
	body := p.buf[:n-ib.ICRCLen]
	if !p.crc.CheckV4(p.to.As4(), p.addr.As4(), from.Port(), ib.UDPPort, body, binary.LittleEndian.Uint32(p.buf[n-ib.ICRCLen:])) {
		p.t.Fatalf("bad ICRC from goverbs")
	}
	if err := ib.Parse(body, &p.pkt); err != nil {
		p.t.Fatalf("goverbs sent a malformed packet: %v", err)
	}
	return &p.pkt
}

// expect waits up to d for an ACK/NAK (AETH syndrome class syn, 0xE0
// masked) for psn, skipping other packets; it fails the test otherwise.
func (p *peer) expect(d time.Duration, syn uint8, psn uint32, what string) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			p.t.Fatalf("%s: no %#x for PSN %#x within %v", what, syn, psn, d)
		}
		k := p.recv(left)
		if k == nil {
			p.t.Fatalf("%s: no %#x for PSN %#x within %v", what, syn, psn, d)
		}
		if k.Op == ib.Acknowledge && k.Syndrome&0xE0 == syn&0xE0 && (syn&0xE0 != ib.SyndromeNAK || k.Syndrome == syn) && k.PSN == psn {
			return
		}
		p.t.Logf("%s: skipped %v PSN %#x syndrome %#x", what, k.Op, k.PSN, k.Syndrome)
	}
}

// write sends an RDMA WRITE of n bytes at va as packets, skipping those
// whose index skip holds (lost on the way), from packet from on (a
// retransmission from there: from > 0 sends MIDDLE/LAST packets only).
func (p *peer) write(first uint32, va uint64, rkey uint32, n, from int, skip map[int]bool) {
	p.t.Helper()
	const mtu = 1024
	np := (n + mtu - 1) / mtu
	for i := from; i < np; i++ {
		if skip[i] {
			continue
		}
		chunk := make([]byte, min(mtu, n-i*mtu))
		for j := range chunk {
			chunk[j] = byte(i*mtu + j)
		}
		op := ib.WriteOpcode(i == 0, i == np-1, false)
		var ext []byte
		if i == 0 {
			ext = reth(va, rkey, uint32(n))
		}
		p.send(op, ib.PSNAdd(first, i), i == np-1, ext, chunk)
	}
}

// appModes are what the goverbs application does while its QP answers
// the peer: nothing (the device's goroutine reads the socket), a loop of
// polls (polled mode: the polls read it), or a blocking wait for a
// completion that does not come (a spin of polls, then asleep). Both use
// the send CQ, which the responder's tests leave empty, so that the
// receive completions stay for the test.
var appModes = []struct {
	name string
	run  func(x *conformance.Side, stop <-chan struct{})
}{
	{"idle", func(x *conformance.Side, stop <-chan struct{}) { <-stop }},
	{"polling", func(x *conformance.Side, stop <-chan struct{}) {
		wc := make([]verbs.WC, 4)
		for {
			select {
			case <-stop:
				return
			default:
			}
			x.SendCQ.Poll(wc)
		}
	}},
	{"waiting", func(x *conformance.Side, stop <-chan struct{}) {
		ctx, cancel := contextWithStop(stop)
		defer cancel()
		for ctx.Err() == nil {
			x.SendCQ.Wait(ctx)
		}
	}},
}

// inModes runs f once per application mode, with a new scripted peer.
func inModes(t *testing.T, f func(t *testing.T, p *peer)) {
	for _, m := range appModes {
		t.Run(m.name, func(t *testing.T) {
			p := newPeer(t, 0x100, 0xFFFFF8, 18) // the peer's PSNs wrap
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { m.run(p.x, stop); close(done) }()
			defer func() { close(stop); <-done }()
			f(t, p)
		})
	}
}

// A WRITE packet lost in the middle: goverbs answers the next one with a
// sequence NAK for it at once, and when the peer resends from there (as
// rxe does, MIDDLE packets from the NAK's PSN), acknowledges the whole
// WRITE at once: neither waits for anything but the packets.
func TestPeerWriteNAKThenResend(t *testing.T) {
	inModes(t, func(t *testing.T, p *peer) {
		va, rkey := p.x.MR.RemoteAddr(0), p.x.MR.RKey()
		for round := range 20 {
			first := p.rpsn
			p.write(first, va, rkey, 16<<10, 0, map[int]bool{11: true})
			p.expect(500*time.Millisecond, ib.SyndromeNAK|ib.NAKPSNSeq, ib.PSNAdd(first, 11), "the sequence NAK")
			p.write(first, va, rkey, 16<<10, 11, map[int]bool{})
			p.expect(500*time.Millisecond, ib.SyndromeACK, ib.PSNAdd(first, 15), "round "+string(rune('0'+round%10))+": the ACK of the resent WRITE")
			p.rpsn = ib.PSNAdd(first, 16)
		}
	})
}

// contextWithStop is a context that ends when stop closes.
func contextWithStop(stop <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// A second loss while the requester resends after a sequence NAK: before
// its second NAK, goverbs acknowledges what it took since the first, so
// that a requester that (as Linux rxe does) starts no second retry from a
// NAK until an ACK has come in between resends at once instead of after
// its ACK timeout. Then the resent rest completes the WRITE.
func TestPeerSecondLossAcknowledgedFirst(t *testing.T) {
	inModes(t, func(t *testing.T, p *peer) {
		va, rkey := p.x.MR.RemoteAddr(0), p.x.MR.RKey()
		for range 10 {
			first := p.rpsn
			p.write(first, va, rkey, 16<<10, 0, map[int]bool{5: true})
			p.expect(500*time.Millisecond, ib.SyndromeNAK|ib.NAKPSNSeq, ib.PSNAdd(first, 5), "the first NAK")
			p.write(first, va, rkey, 16<<10, 5, map[int]bool{9: true})
			p.expect(500*time.Millisecond, ib.SyndromeACK, ib.PSNAdd(first, 8), "the ACK of what came in order")
			p.expect(500*time.Millisecond, ib.SyndromeNAK|ib.NAKPSNSeq, ib.PSNAdd(first, 9), "the second NAK")
			p.write(first, va, rkey, 16<<10, 9, nil)
			p.expect(500*time.Millisecond, ib.SyndromeACK, ib.PSNAdd(first, 15), "the ACK of the WRITE")
			p.rpsn = ib.PSNAdd(first, 16)
		}
	})
}

// next returns the next request packet goverbs sends (skipping ACKs), or
// fails the test after d.
func (p *peer) next(d time.Duration, what string) ib.Packet {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		k := p.recv(time.Until(deadline))
		if k == nil {
			p.t.Fatalf("%s: nothing within %v", what, d)
		}
		if k.Op != ib.Acknowledge {
			c := *k
			c.Payload = append([]byte(nil), k.Payload...)
			return c
		}
	}
}

// A READ asked again from one of its responses (rxe, its responses after
// the first lost: the request repeated at that PSN, its RETH's address
// and length advanced) is answered from there, with the original's data;
// the requests after it carry on where they were.
func TestPeerReadAskedAgainMidMessage(t *testing.T) {
	inModes(t, func(t *testing.T, p *peer) {
		for i := range p.x.Buf[:16<<10] {
			p.x.Buf[i] = byte(i*7 + i>>8)
		}
		va, rkey := p.x.MR.RemoteAddr(0), p.x.MR.RKey()
		first := p.rpsn
		p.send(ib.ReadRequest, first, true, reth(va, rkey, 16<<10), nil)
		for i := range 16 {
			k := p.next(time.Second, "a READ response")
			if k.PSN != ib.PSNAdd(first, i) || !bytes.Equal(k.Payload, p.x.Buf[i*1024:(i+1)*1024]) {
				t.Fatalf("response %d: PSN %#x, %d bytes", i, k.PSN, len(k.Payload))
			}
		}
		// Responses 6 on were lost: asked again from there.
		p.send(ib.ReadRequest, ib.PSNAdd(first, 6), true, reth(va+6*1024, rkey, 10<<10), nil)
		for i := 6; i < 16; i++ {
			k := p.next(time.Second, "a READ response asked again")
			wantOp := ib.ReadResponseOpcode(i-6, 10)
			if k.PSN != ib.PSNAdd(first, i) || k.Op != wantOp || !bytes.Equal(k.Payload, p.x.Buf[i*1024:(i+1)*1024]) {
				t.Fatalf("response %d asked again: %v PSN %#x, %d bytes (want %v PSN %#x)", i, k.Op, k.PSN, len(k.Payload), wantOp, ib.PSNAdd(first, i))
			}
		}
		// The next request is the one after the READ's PSNs.
		p.rpsn = ib.PSNAdd(first, 16)
		p.write(p.rpsn, va+32<<10, rkey, 3000, 0, nil)
		p.expect(time.Second, ib.SyndromeACK, ib.PSNAdd(p.rpsn, 2), "the ACK of the WRITE after the READ")
		p.rpsn = ib.PSNAdd(p.rpsn, 3)
	})
}

// A SEND and a WRITE whose ACKs were lost, sent again (rxe after its ACK
// timeout): goverbs acknowledges them again and executes neither twice
// (one receive completion, no second receive consumed).
func TestPeerDuplicatesAcknowledgedAgain(t *testing.T) {
	inModes(t, func(t *testing.T, p *peer) {
		for i := range 2 {
			if err := p.x.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{p.x.MR.SGE(64<<10, 4096)}}}); err != nil {
				t.Fatal(err)
			}
		}
		va, rkey := p.x.MR.RemoteAddr(0), p.x.MR.RKey()
		first := p.rpsn
		p.write(first, va, rkey, 5000, 0, nil) // 5 packets
		p.send(ib.SendOnly, ib.PSNAdd(first, 5), true, nil, []byte("hello"))
		p.expect(time.Second, ib.SyndromeACK, ib.PSNAdd(first, 5), "the ACK")
		for range 3 { // the ACK lost, thrice: everything again from the WRITE's start
			p.write(first, va, rkey, 5000, 0, nil)
			p.send(ib.SendOnly, ib.PSNAdd(first, 5), true, nil, []byte("hello"))
			p.expect(time.Second, ib.SyndromeACK, ib.PSNAdd(first, 5), "the ACK of the duplicates")
		}
		p.rpsn = ib.PSNAdd(first, 6)
		p.send(ib.SendOnly, p.rpsn, true, nil, []byte("world"))
		p.expect(time.Second, ib.SyndromeACK, p.rpsn, "the ACK of the second SEND")
		p.rpsn = ib.PSNAdd(p.rpsn, 1)
		var got []string
		wc := make([]verbs.WC, 4)
		for deadline := time.Now().Add(time.Second); len(got) < 2 && time.Now().Before(deadline); {
			n, _ := p.x.RecvCQ.Poll(wc)
			for _, c := range wc[:n] {
				got = append(got, string(p.x.Buf[64<<10:64<<10+int(c.ByteLen)]))
			}
		}
		time.Sleep(10 * time.Millisecond)
		if n, _ := p.x.RecvCQ.Poll(wc); n != 0 || len(got) != 2 {
			t.Fatalf("receive completions: %q and %d more, want one per SEND", got, n)
		}
	})
}

// completions polls the goverbs side's send CQ until n completions came
// (or fails after d) and returns their statuses.
func (p *peer) completions(n int, d time.Duration) []verbs.WCStatus {
	p.t.Helper()
	var st []verbs.WCStatus
	wc := make([]verbs.WC, 8)
	for deadline := time.Now().Add(d); len(st) < n; {
		k, _ := p.x.SendCQ.Poll(wc)
		for _, c := range wc[:k] {
			st = append(st, c.Status)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%d of %d send completions within %v: %v", len(st), n, d, st)
		}
	}
	return st
}

// post posts a signaled work request on the goverbs QP.
func (p *peer) post(wr verbs.SendWR) {
	p.t.Helper()
	wr.Flags |= verbs.SendSignaled
	if err := p.x.QP.PostSend([]verbs.SendWR{wr}); err != nil {
		p.t.Fatal(err)
	}
}

// An RNR NAK: goverbs sends the request again after the RNR timer the NAK
// names (here 0.96 ms), not after its ACK timeout (1 s), and completes it
// when the peer then acknowledges it.
func TestPeerRNRNAKResendsAfterItsTimer(t *testing.T) {
	p := newPeer(t, 0x100, 0, 18) // ACK timeout ≈ 1.07 s
	p.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{p.x.MR.SGE(0, 100)}})
	k := p.next(time.Second, "the SEND")
	for range 3 {
		p.send(ib.Acknowledge, k.PSN, false, aeth(ib.SyndromeRNR|3, 0), nil) // 0.96 ms
		start := time.Now()
		k = p.next(2*time.Second, "the SEND after an RNR NAK")
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("sent again %v after an RNR NAK of 0.96 ms: the ACK timeout's wait, not the RNR timer's", el)
		}
	}
	p.send(ib.Acknowledge, 0x100, false, aeth(ib.SyndromeACK|ib.CreditsNone, 1), nil)
	if st := p.completions(1, time.Second); st[0] != verbs.WCSuccess {
		t.Fatalf("SEND completed with %v", st[0])
	}
}

// One ACK for the last of three SENDs (coalesced) completes all three.
func TestPeerCoalescedACK(t *testing.T) {
	p := newPeer(t, 0x100, 0, 18)
	for i := range 3 {
		p.post(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{p.x.MR.SGE(0, 100)}})
	}
	for range 3 {
		p.next(time.Second, "a SEND")
	}
	p.send(ib.Acknowledge, 0x102, false, aeth(ib.SyndromeACK|ib.CreditsNone, 3), nil)
	for i, st := range p.completions(3, time.Second) {
		if st != verbs.WCSuccess {
			t.Fatalf("SEND %d completed with %v", i, st)
		}
	}
}

// READ responses with a gap: goverbs asks again from the first missing
// one at once (its RETH advanced to it), takes the responses of the new
// request, and completes the READ with the whole of the data.
func TestPeerReadResponsesLost(t *testing.T) {
	p := newPeer(t, 0x100, 0, 18)
	src := make([]byte, 16<<10)
	for i := range src {
		src[i] = byte(i*3 + i>>8)
	}
	const va, rkey = 0x10000, 0x77
	p.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{p.x.MR.SGE(0, len(src))}, RemoteAddr: va, RKey: rkey})
	req := p.next(time.Second, "the READ request")
	if req.Op != ib.ReadRequest || req.VA != va || req.DMALen != uint32(len(src)) {
		t.Fatalf("READ request %v va %#x len %d", req.Op, req.VA, req.DMALen)
	}
	respond := func(first uint32, from, to, skip int) { p.readResponses(src, first, from, to, skip) }
	respond(req.PSN, 0, 16, 6)
	start := time.Now()
	again := p.next(time.Second, "the READ asked again")
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("asked again after %v: the ACK timeout's wait", el)
	}
	if again.Op != ib.ReadRequest || again.PSN != ib.PSNAdd(req.PSN, 6) || again.VA != va+6*1024 || again.DMALen != 10<<10 {
		t.Fatalf("asked again: %v PSN %#x va %#x len %d", again.Op, again.PSN, again.VA, again.DMALen)
	}
	respond(again.PSN, 6, 16, -1)
	if st := p.completions(1, time.Second); st[0] != verbs.WCSuccess {
		t.Fatalf("READ completed with %v", st[0])
	}
	if !bytes.Equal(p.x.Buf[:len(src)], src) {
		t.Fatal("the READ's data differs from the responses'")
	}
}

// readResponses answers a READ of src with its responses for packets
// from to to (of 1 KiB; the first at PSN first), leaving out packet skip.
func (p *peer) readResponses(src []byte, first uint32, from, to, skip int) {
	for i := from; i < to; i++ {
		if i == skip {
			continue
		}
		op := ib.ReadResponseOpcode(i-from, to-from)
		var ext []byte
		if op.Info().Mask&ib.HasAETH != 0 {
			ext = aeth(ib.SyndromeACK|ib.CreditsNone, 1)
		}
		p.send(op, ib.PSNAdd(first, i-from), false, ext, src[i*1024:(i+1)*1024])
	}
}

// A request lost with nothing after it (no NAK can come): goverbs sends
// it again after one ACK timeout (268 ms here): not before it (the peer
// may be slow), and not after two.
func TestPeerTailLossOneTimeout(t *testing.T) {
	p := newPeer(t, 0x100, 0, 16) // 4.096 µs × 2^16 ≈ 268 ms
	p.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{p.x.MR.SGE(0, 100)}})
	k := p.next(time.Second, "the SEND")
	start := time.Now()
	k2 := p.next(2*time.Second, "the SEND again")
	el := time.Since(start)
	if k2.PSN != k.PSN || el < 250*time.Millisecond || el > 530*time.Millisecond {
		t.Fatalf("sent again after %v (PSN %#x, first %#x): want one ACK timeout (268 ms)", el, k2.PSN, k.PSN)
	}
	p.send(ib.Acknowledge, k.PSN, false, aeth(ib.SyndromeACK|ib.CreditsNone, 1), nil)
	if st := p.completions(1, time.Second); st[0] != verbs.WCSuccess {
		t.Fatalf("SEND completed with %v", st[0])
	}
}

// The first missing READ response missing again from the responses to the
// READ asked again: goverbs asks a third time at once (a response for a
// PSN it saw before asking again is one of the new request's), not after
// its ACK timeout; responses still in flight from the first request make
// it ask no more than that.
func TestPeerReadResponseLostTwice(t *testing.T) {
	p := newPeer(t, 0x100, 0, 18) // ACK timeout ≈ 1.07 s
	src := make([]byte, 16<<10)
	for i := range src {
		src[i] = byte(i*5 + i>>9)
	}
	const va, rkey = 0x20000, 0x99
	p.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{p.x.MR.SGE(0, len(src))}, RemoteAddr: va, RKey: rkey})
	req := p.next(time.Second, "the READ request")
	respond := func(first uint32, from, to, skip int) { p.readResponses(src, first, from, to, skip) }
	respond(req.PSN, 0, 16, 6)
	for try := range 2 {
		start := time.Now()
		again := p.next(time.Second, "the READ asked again")
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("try %d: asked again after %v: the ACK timeout's wait", try, el)
		}
		if again.Op != ib.ReadRequest || again.PSN != ib.PSNAdd(req.PSN, 6) || again.VA != va+6*1024 {
			t.Fatalf("try %d: asked again: %v PSN %#x va %#x", try, again.Op, again.PSN, again.VA)
		}
		if try == 0 {
			respond(again.PSN, 6, 16, 6) // the first one lost again
		} else {
			respond(again.PSN, 6, 16, -1)
		}
	}
	if st := p.completions(1, time.Second); st[0] != verbs.WCSuccess {
		t.Fatalf("READ completed with %v", st[0])
	}
	if !bytes.Equal(p.x.Buf[:len(src)], src) {
		t.Fatal("the READ's data differs from the responses'")
	}
	// No request more than the two: the responses of each came after it.
	if k := p.recv(100 * time.Millisecond); k != nil && k.Op == ib.ReadRequest {
		t.Fatalf("a third READ asked again (PSN %#x)", k.PSN)
	}
}

// A SEND whose receiver's application blocks in CQ.Wait (the waiting
// goroutine reads the device's socket itself): its ACK is not sent before
// the wait returns the receive completion, but with the application's
// next post (its reply), so that a requester blocked until its SEND
// completes is woken once for both. (The engine's poll idle time sends it
// anyway when no post follows: an ACK already there in a few rounds out of
// twenty is a loaded machine's delay.)
func TestPeerACKWithReply(t *testing.T) {
	p := newPeer(t, 0x100, 0x500, 18)
	p.x.RecvCQ.SetWaitSpin(0)
	early := 0
	for i := range uint32(20) {
		p.x.MustPostRecv(t, p.x.Recv(uint64(i), 0, 64))
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got <- p.x.RecvCQ.Wait(ctx)
		}()
		time.Sleep(2 * time.Millisecond) // the wait blocks in the socket
		p.send(ib.SendOnly, 0x500+i, true, nil, []byte("ping----"))
		if err := <-got; err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		acked := false
		if k := p.recv(time.Microsecond); k != nil {
			early++ // the ACK left before the application's post
			if k.Op != ib.Acknowledge || k.PSN != 0x500+i {
				t.Fatalf("round %d: %v PSN %#x, want the ACK of %#x", i, k.Op, k.PSN, 0x500+i)
			}
			acked = true
		}
		conformance.ExpectWC(t, conformance.Poll1(t, p.x.RecvCQ), uint64(i), verbs.WCSuccess, verbs.WCRecv)
		p.post(verbs.SendWR{WRID: uint64(100 + i), Opcode: verbs.WRSend, SGList: []verbs.SGE{p.x.MR.SGE(0, 8)}})
		for replied := false; !acked || !replied; {
			k := p.recv(time.Second)
			switch {
			case k == nil:
				t.Fatalf("round %d: reply %v, ACK %v within a second", i, replied, acked)
			case k.Op == ib.Acknowledge && k.PSN == 0x500+i:
				acked = true
			case k.Op == ib.SendOnly && k.PSN == 0x100+i:
				replied = true
			}
		}
		p.send(ib.Acknowledge, 0x100+i, false, aeth(ib.SyndromeACK|ib.CreditsNone, i+1), nil)
		if st := p.completions(1, time.Second); st[0] != verbs.WCSuccess {
			t.Fatalf("round %d: reply completed with %v", i, st[0])
		}
	}
	if early > 5 {
		t.Fatalf("the ACK left before the application's reply in %d of 20 rounds", early)
	}
}

// A responder acknowledges a SEND before a reply that makes a receive
// completion at the requester (a SEND, a WRITE with immediate data) leaves:
// an HCA (and rxe) sends the ACK when it executes the request, before the
// receive completion is seen, so a reply caused by that completion follows
// the ACK on the wire, and the requester's send completion comes before
// its receive completion of the reply. Requesters count on it: perftest's
// send_lat in event mode waits for one event and then polls the CQ it
// expects once, and loses step for ever if the reply's receive completion
// comes first. Here the application answers each SEND as a ping-pong does,
// polling or waiting for the receive completion, and the peer must see the
// ACK of its SEND before the reply.
func TestPeerACKPrecedesReply(t *testing.T) {
	waits := []struct {
		name string
		wait func(x *conformance.Side, wc []verbs.WC) int
	}{
		{"polling", func(x *conformance.Side, wc []verbs.WC) int {
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
				if n, _ := x.RecvCQ.Poll(wc); n > 0 {
					return n
				}
			}
			return 0
		}},
		{"waiting", func(x *conformance.Side, wc []verbs.WC) int {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if x.RecvCQ.Wait(ctx) != nil {
				return 0
			}
			n, _ := x.RecvCQ.Poll(wc)
			return n
		}},
	}
	replies := []struct {
		wr verbs.SendWR
		op ib.Opcode
	}{
		{verbs.SendWR{Opcode: verbs.WRSend}, ib.SendOnly},
		{verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, ImmData: 7, RemoteAddr: 0x10000, RKey: 0x1234}, ib.WriteOnlyImm},
	}
	for _, m := range waits {
		for _, rp := range replies {
			t.Run(m.name+"/"+rp.op.String(), func(t *testing.T) {
				p := newPeer(t, 0x100, 0xFFFFF0, 18)
				const rounds = 20
				errc := make(chan error, 1)
				posted := make(chan struct{}, rounds)
				go func() { // the goverbs application: receive, then reply
					wc := make([]verbs.WC, 1)
					for i := range rounds {
						if err := p.x.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{p.x.MR.SGE(64<<10, 64)}}}); err != nil {
							errc <- err
							return
						}
						posted <- struct{}{}
						if m.wait(p.x, wc) != 1 || wc[0].Status != verbs.WCSuccess {
							errc <- errors.New("no receive completion")
							return
						}
						wr := rp.wr
						wr.WRID, wr.SGList = uint64(i), []verbs.SGE{p.x.MR.SGE(0, 8)}
						if err := p.x.QP.PostSend([]verbs.SendWR{wr}); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				spsn := uint32(0x100)
				for i := range rounds {
					select { // the application's receive is posted (no RNR NAK)
					case <-posted:
					case err := <-errc:
						t.Fatalf("round %d: %v", i, err)
					}
					time.Sleep(time.Millisecond) // and it polls or waits
					psn := p.rpsn
					p.send(ib.SendOnly, psn, true, nil, []byte("ping"))
					p.rpsn = ib.PSNAdd(psn, 1)
					k := p.recv(2 * time.Second)
					if k == nil {
						t.Fatalf("round %d: nothing from goverbs", i)
					}
					if k.Op != ib.Acknowledge || k.PSN != psn {
						t.Fatalf("round %d: goverbs sent %v PSN %#x first, not the ACK of the SEND (PSN %#x) it answers", i, k.Op, k.PSN, psn)
					}
					r := p.next(2*time.Second, "the reply")
					if r.Op != rp.op || r.PSN != spsn {
						t.Fatalf("round %d: reply %v PSN %#x, want %v PSN %#x", i, r.Op, r.PSN, rp.op, spsn)
					}
					p.send(ib.Acknowledge, spsn, false, aeth(ib.SyndromeACK|ib.CreditsNone, uint32(i+1)), nil)
					spsn = ib.PSNAdd(spsn, 1)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// A SEND or WRITE of many packets whose only one asking for an ACK is the
// last (as rxe sends up to 64): goverbs acknowledges the first while the
// rest is still to come. rxe's requester never stops its retransmission
// timer, and only an ACK that comes while packets are outstanding puts it
// off: with the last packet's ACK alone it runs out one timeout after it
// was armed however quick every ACK is, and rxe resends a whole message
// (see acks.go).
func TestPeerFirstPacketAcknowledged(t *testing.T) {
	inModes(t, func(t *testing.T, p *peer) {
		const n = 8 << 10 // 8 packets of the path MTU (1 KiB)
		const spaced, backToBack = 6, 10
		va, rkey := p.x.MR.RemoteAddr(0), p.x.MR.RKey()
		chunk := make([]byte, 1024)
		firstACKs := 0 // in the rounds back to back
		for round := range spaced + backToBack {
			first := p.rpsn
			write := round%2 == 1
			if !write {
				p.x.MustPostRecv(t, p.x.Recv(uint64(round), 64<<10, n))
			}
			for i := range n / 1024 {
				last := i == n/1024-1
				if write {
					var ext []byte
					if i == 0 {
						ext = reth(va, rkey, n)
					}
					p.send(ib.WriteOpcode(i == 0, last, false), ib.PSNAdd(first, i), last, ext, chunk)
				} else {
					p.send(ib.SendOpcode(i == 0, last, false, false), ib.PSNAdd(first, i), last, nil, chunk)
				}
				if i == 0 && round < spaced {
					p.expect(2*time.Second, ib.SyndromeACK, first, fmt.Sprintf("round %d (WRITE %v): the ACK of the first packet, the rest to come", round, write))
				}
			}
			lastPSN := ib.PSNAdd(first, n/1024-1)
			if round < spaced {
				p.expect(2*time.Second, ib.SyndromeACK, lastPSN, fmt.Sprintf("round %d: the ACK of the last packet", round))
				time.Sleep(roce.FirstACKEvery + time.Millisecond) // the next round's first packet is due an ACK
			} else {
				// Back to back with the round before: the first packet's
				// ACK comes at most every roce.FirstACKEvery, not with every
				// message.
				for deadline := time.Now().Add(2 * time.Second); ; {
					k := p.recv(time.Until(deadline))
					if k == nil {
						t.Fatalf("round %d: no ACK of the last packet", round)
					}
					if k.Op != ib.Acknowledge {
						continue
					}
					if k.PSN == first {
						firstACKs++
					}
					if k.PSN == lastPSN {
						break
					}
				}
			}
			p.rpsn = ib.PSNAdd(first, n/1024)
		}
		if firstACKs > backToBack/2 {
			t.Fatalf("%d of %d messages back to back had their first packet acknowledged; want one every %v at most", firstACKs, backToBack, roce.FirstACKEvery)
		}
		for i := range (spaced + backToBack) / 2 {
			conformance.ExpectWC(t, conformance.Poll1(t, p.x.RecvCQ), uint64(2*i), verbs.WCSuccess, verbs.WCRecv)
		}
	})
}

// rxe's spurious retransmission (its timer ran out while the ACK was on
// its way, see acks.go): a whole multi-packet SEND again after goverbs
// acknowledged it, and again from its start while its first transmission
// is only half in. goverbs executes each once, acknowledges the resends
// with the PSN before the one it expects and the count of messages it
// completed (MSN), and takes the next SEND as new.
func TestPeerSpuriousResendOfMessage(t *testing.T) {
	inModes(t, func(t *testing.T, p *peer) {
		const np = 16 // packets of each SEND
		chunk := make([]byte, 1024)
		sendPkts := func(first uint32, from, to int, tag byte) {
			for i := from; i < to; i++ {
				chunk[0] = tag
				p.send(ib.SendOpcode(i == 0, i == np-1, false, false), ib.PSNAdd(first, i), i == np-1, nil, chunk)
			}
		}
		// expectMSN waits for an ACK of psn, which must say msn.
		expectMSN := func(psn, msn uint32, what string) {
			t.Helper()
			for deadline := time.Now().Add(2 * time.Second); ; {
				k := p.recv(time.Until(deadline))
				if k == nil {
					t.Fatalf("%s: no ACK of PSN %#x", what, psn)
				}
				if k.Op == ib.Acknowledge && k.Syndrome&0xE0 == ib.SyndromeACK && k.PSN == psn {
					if k.MSN != msn {
						t.Fatalf("%s: ACK of PSN %#x with MSN %d, want %d", what, psn, k.MSN, msn)
					}
					return
				}
			}
		}
		for i := range 3 {
			p.x.MustPostRecv(t, p.x.Recv(uint64(i), 64<<10+i*np*1024, np*1024))
		}
		a := p.rpsn
		sendPkts(a, 0, np, 'a')
		expectMSN(ib.PSNAdd(a, np-1), 1, "the first SEND")
		sendPkts(a, 0, np, 'x') // all of it again: the ACK came too late
		expectMSN(ib.PSNAdd(a, np-1), 1, "the first SEND resent")
		b := ib.PSNAdd(a, np)
		sendPkts(b, 0, np/2, 'b')
		sendPkts(b, 0, np, 'b') // resent from its start, half of it in
		expectMSN(ib.PSNAdd(b, np-1), 2, "the second SEND, resent from its start")
		c := ib.PSNAdd(b, np)
		sendPkts(c, 0, np, 'c')
		expectMSN(ib.PSNAdd(c, np-1), 3, "the third SEND")
		p.rpsn = ib.PSNAdd(c, np)
		for i, tag := range []byte("abc") {
			wc := conformance.Poll1(t, p.x.RecvCQ)
			conformance.ExpectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRecv)
			if at := 64<<10 + i*np*1024; wc.ByteLen != np*1024 || p.x.Buf[at] != tag {
				t.Fatalf("receive %d: %d bytes starting %q, want %d starting %q", i, wc.ByteLen, p.x.Buf[at], np*1024, tag)
			}
		}
		time.Sleep(10 * time.Millisecond)
		if n, _ := p.x.RecvCQ.Poll(make([]verbs.WC, 4)); n != 0 {
			t.Fatalf("%d receive completions more than the three SENDs", n)
		}
	})
}
