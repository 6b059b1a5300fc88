package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// hostile sends packets to a QP as if from its peer's address (RoCE has
// no authentication: anyone on the path can), with a valid ICRC, so that
// they get past the checks of the device and reach the transport's rules.
type hostile struct {
	c        *net.UDPConn
	from, to netip.Addr
	sport    uint16 // c's port, which the ICRC covers
	crc      ib.Scratch
	rnd      *rand.Rand
	seed     uint64
	qpn      uint32
	psn      uint32 // around where the victim's PSNs are
	rkey     uint32 // a real region's key and address, for some RETHs
	va       uint64
	size     int
}

func newHostile(t *testing.T, from, to netip.Addr, seed uint64) *hostile {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
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
	return &hostile{c: c, from: from, to: to, sport: uint16(c.LocalAddr().(*net.UDPAddr).Port), rnd: rand.New(rand.NewPCG(seed, 1)), seed: seed}
}

// write sends pkt (its headers and payload) with its ICRC, a wrong one
// with bad.
func (h *hostile) write(t *testing.T, pkt []byte, bad bool) {
	crc := h.crc.V4(h.from.As4(), h.to.As4(), h.sport, ib.UDPPort, 0, true, pkt)
	if bad {
		crc++ // dropped and counted
	}
	pkt = binary.LittleEndian.AppendUint32(pkt, crc)
	if _, err := h.c.WriteToUDPAddrPort(pkt, netip.AddrPortFrom(h.to, ib.UDPPort)); err != nil && !isTransient(err) {
		t.Fatal(err)
	}
}

// opcodes the hostile peer picks from: every RC request and response, and
// some that an RC QP must not take (UD's, unknown ones).
var hostileOps = []ib.Opcode{
	ib.SendFirst, ib.SendMiddle, ib.SendLast, ib.SendLastImm, ib.SendOnly, ib.SendOnlyImm,
	ib.WriteFirst, ib.WriteMiddle, ib.WriteLast, ib.WriteLastImm, ib.WriteOnly, ib.WriteOnlyImm,
	ib.ReadRequest, ib.ReadResponseFirst, ib.ReadResponseMid, ib.ReadResponseLast, ib.ReadResponseOnly,
	ib.Acknowledge, ib.AtomicAcknowledge, ib.CompareSwap, ib.FetchAdd, ib.SendLastInv, ib.SendOnlyInv,
	ib.Flush, ib.AtomicWrite, ib.UDSendOnly, ib.UDSendOnlyImm, 0x15, 0x18, 0x1F, 0x80,
}

// send sends one packet built from the generator's choices.
func (h *hostile) send(t *testing.T) {
	r := h.rnd
	op := hostileOps[r.IntN(len(hostileOps))]
	hl := op.Info().HdrLen
	if hl == 0 {
		hl = ib.BTHLen + r.IntN(32)
	}
	n := 0
	switch r.IntN(4) {
	case 0:
		n = r.IntN(16)
	case 1, 2:
		n = r.IntN(1100) // around the path MTU (1024)
	case 3:
		n = r.IntN(5000)
	}
	pkt := make([]byte, hl+n, hl+n+ib.ICRCLen)
	for i := ib.BTHLen; i < len(pkt); i++ {
		pkt[i] = byte(r.Uint32())
	}
	psn := ib.PSNAdd(h.psn, r.IntN(24)-8)
	if r.IntN(50) == 0 {
		psn = r.Uint32() & 0xFFFFFF
	}
	pkey := uint16(0xFFFF)
	if r.IntN(50) == 0 {
		pkey = uint16(r.Uint32())
	}
	qpn := h.qpn
	if r.IntN(50) == 0 {
		qpn = r.Uint32() & 0xFFFFFF
	}
	ib.PutBTH(pkt, op, r.IntN(2) == 0, r.IntN(4), pkey, qpn, r.IntN(2) == 0, psn)
	if r.IntN(100) == 0 {
		pkt[1] |= byte(r.IntN(15)+1) & 0xF // a transport header version that is not 0
	}
	m := op.Info().Mask
	if m&ib.HasRETH != 0 && r.IntN(3) > 0 {
		// A real key, mostly in bounds: the checks of the access itself.
		o := ib.BTHLen
		off := uint64(r.IntN(h.size + 64))
		binary.BigEndian.PutUint64(pkt[o:], h.va+off-uint64(r.IntN(2)*32))
		binary.BigEndian.PutUint32(pkt[o+8:], h.rkey)
		dmaLen := uint32(r.IntN(3 * h.size))
		if r.IntN(10) == 0 {
			dmaLen = r.Uint32() // up to 4 GiB
		}
		binary.BigEndian.PutUint32(pkt[o+12:], dmaLen)
	}
	if m&ib.HasAETH != 0 && r.IntN(2) == 0 {
		o := hl - ib.AETHLen
		if op == ib.AtomicAcknowledge {
			o = hl - ib.AETHLen - ib.AtomicAckETHLen
		}
		syn := []byte{ib.SyndromeACK | ib.CreditsNone, ib.SyndromeRNR | byte(r.IntN(32)), ib.SyndromeNAK | byte(r.IntN(6)), byte(r.Uint32())}[r.IntN(4)]
		binary.BigEndian.PutUint32(pkt[o:], uint32(syn)<<24|(r.Uint32()&0xFF))
	}
	h.write(t, pkt, r.IntN(100) == 0)
	if r.IntN(20) == 0 {
		h.psn = ib.PSNAdd(h.psn, 1) // the victim's expected PSN moves on as it takes packets
	}
}

// isTransient reports a send error that a lossy wire would hide.
func isTransient(err error) bool {
	return errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ECONNREFUSED)
}

// forge sends one packet of opcode op and PSN psn to the QP, its
// extension headers ext (then no payload).
func (h *hostile) forge(t *testing.T, op ib.Opcode, psn uint32, ext []byte) {
	pkt := make([]byte, ib.BTHLen, ib.BTHLen+len(ext)+ib.ICRCLen)
	ib.PutBTH(pkt, op, false, 0, 0xFFFF, h.qpn, false, psn)
	pkt = append(pkt, ext...)
	h.write(t, pkt, false)
}

// An ACK for a PSN the requester has not sent yet (forged, or a stale
// one from an earlier connection's PSNs) acknowledges nothing: the WRITE
// the peer never received is not completed as a success, and fails with
// RETRY_EXC_ERR once the retries run out (the peer is silent).
func TestGhostACK(t *testing.T) {
	leakcheck.Check(t)
	const psn = 0xFFFFF0 // the ghost's PSN wraps past 2^24
	x, _ := pairAt(t, psn, 64<<10, 10, 3)
	defer roce.SetWireFaults(func([]byte) roce.FaultKind { return roce.FaultDrop })()
	h := newHostile(t, testAddrs[1], testAddrs[0], 1)
	h.qpn = x.QP.Num()
	before, _ := roce.DeviceCounters(x.Ctx.Device().Name())
	if err := x.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{x.MR.SGE(0, 3000)}, RemoteAddr: 0, RKey: 1}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // its 3 packets (PSNs psn to psn+2) are out
	aeth := binary.BigEndian.AppendUint32(nil, uint32(ib.SyndromeACK|ib.CreditsNone)<<24|1)
	h.forge(t, ib.Acknowledge, ib.PSNAdd(psn, 20), aeth)
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := x.SendCQ.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if wc[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("WRITE completed with %v, want RETRY_EXC_ERR (the ghost ACK acknowledged it)", wc[0].Status)
	}
	if after, _ := roce.DeviceCounters(x.Ctx.Device().Name()); after.Malformed == before.Malformed {
		t.Fatalf("the ghost ACK was not counted as dropped")
	}
}

// TestHostilePeer: a connected QP receives thousands of forged packets
// from its peer's address with valid ICRCs (every opcode, PSNs around
// the expected ones, real and bogus keys, lengths below, at and beyond
// the MTU, responses to requests it has outstanding) while it runs real
// traffic. Nothing panics or hangs: every work request it posted
// completes (successfully, or with an error and then WR_FLUSH_ERR when a
// forged packet broke the connection, as on any unauthenticated wire),
// the device counts what it dropped, and a new connection on the same
// devices works.
func TestHostilePeer(t *testing.T) {
	leakcheck.Check(t)
	victims, broken := 0, 0
	for seed := uint64(hostileBase); seed < uint64(hostileBase+hostileSeeds); seed++ {
		h := newHostile(t, testAddrs[1], testAddrs[0], seed)
		// A victim that a forged packet broke (a request it had to refuse
		// puts an RC QP in ERR) is replaced, so that the packets after it
		// meet live connections in every state.
		for left := hostilePackets; left > 0; {
			psn := h.rnd.Uint32() & 0xFFFFFF
			x, y := pairAt(t, psn, 64<<10, 10, 3)
			h.qpn, h.psn, h.rkey, h.va, h.size = x.QP.Num(), psn, x.MR.RKey(), x.MR.RemoteAddr(0), len(x.Buf)
			left -= attack(t, h, x, y, left)
			victims++
			if st, _, _ := x.QP.Query(); st.QPState == verbs.QPSErr {
				broken++
			}
		}
	}
	t.Logf("%d connections attacked, %d broken by forged packets", victims, broken)
	// The devices still carry a connection.
	x, y := pairAt(t, 7, 80*slot, 14, 7)
	traffic(t, x, y, 20)
}

// attack sends up to budget forged packets to x, until x's QP fails,
// while x keeps SENDs, WRITEs and READs towards y outstanding (so that
// forged responses meet real requests); every request x posted must then
// complete. It returns how many packets it sent.
func attack(t *testing.T, h *hostile, x, y *conformance.Side, budget int) int {
	before, _ := roce.DeviceCounters(x.Ctx.Device().Name())
	posted, done := 0, 0
	wc := make([]verbs.WC, 64)
	for i := range 32 {
		if err := x.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(1000 + i), SGList: []verbs.SGE{x.MR.SGE(32<<10, 32<<10)}}}); err != nil {
			t.Fatal(err)
		}
		if err := y.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{y.MR.SGE(0, 8<<10)}}}); err != nil {
			t.Fatal(err)
		}
	}
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead}
	// y takes x's SENDs: a receive for each one it used (without, y
	// answers RNR, and with rnr_retry 7 x would try for ever).
	yrecv := func() {
		n, _ := y.RecvCQ.Poll(wc)
		for range n {
			if err := y.QP.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, 8<<10)}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sent := 0
	for ; sent < budget; sent++ {
		h.send(t)
		if sent%50 == 0 {
			if st, _, _ := x.QP.Query(); st.QPState == verbs.QPSErr {
				break
			}
			if posted-done < 8 {
				op := ops[posted%len(ops)]
				if err := x.QP.PostSend([]verbs.SendWR{{WRID: uint64(posted), Opcode: op, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{x.MR.SGE(0, 2048)}, RemoteAddr: y.MR.RemoteAddr(16 << 10), RKey: y.MR.RKey()}}); err == nil {
					posted++
				}
			}
		}
		n, _ := x.SendCQ.Poll(wc)
		done += n
		x.RecvCQ.Poll(wc)
		yrecv()
	}
	deadline := time.Now().Add(30 * time.Second)
	for done < posted {
		if time.Now().After(deadline) {
			st, _, _ := x.QP.Query()
			t.Fatalf("seed %d, after %d forged packets: %d of %d send completions (QP %v)\n%s", h.seed, sent, done, posted, st.QPState,
				roce.SendStateOf(x.Ctx.Device().Name(), x.QP.Num()))
		}
		n, err := x.SendCQ.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		done += n
		yrecv()
		time.Sleep(time.Millisecond)
	}
	after, _ := roce.DeviceCounters(x.Ctx.Device().Name())
	if sent >= 200 && after.BadICRC+after.Malformed+after.NoQP == before.BadICRC+before.Malformed+before.NoQP {
		t.Fatalf("%d packets and no drop counted: %+v -> %+v", sent, before, after)
	}
	return sent + 1
}

// How many attackers TestHostilePeer runs (seeds from hostileBase), each
// with how many packets. GOVERBS_HOSTILE=n searches longer: 16 attackers
// from seed n, 20,000 packets each (about 5 s; 30 s with -race).
var hostileBase, hostileSeeds, hostilePackets = func() (int, int, int) {
	if n, err := strconv.Atoi(os.Getenv("GOVERBS_HOSTILE")); err == nil {
		return n, 16, 20000
	}
	return 0, 4, 8000
}()

// mad sends one forged CM MAD to QP1 of the device at h.to: every CM
// message (and unknown ones), random communication IDs, REQs and SIDR
// REQs for port (and other services), rdma_cm headers good and bad,
// broken MAD headers, wrong Q_Keys, short MADs.
func (h *hostile) mad(t *testing.T, port uint16) {
	r := h.rnd
	var m [ib.MADLen]byte
	for i := range m {
		m[i] = byte(r.Uint32())
	}
	attrs := []uint16{ib.AttrREQ, ib.AttrREQ, ib.AttrMRA, ib.AttrREJ, ib.AttrREP, ib.AttrRTU, ib.AttrDREQ, ib.AttrDREP,
		ib.AttrSIDRReq, ib.AttrSIDRRep, 0x0019, 0}
	attr := attrs[r.IntN(len(attrs))]
	sid := func(ps uint16) uint64 {
		if r.IntN(4) == 0 {
			return r.Uint64()
		}
		return ib.ServiceID(ps, port)
	}
	switch attr {
	case ib.AttrREQ:
		q := ib.REQ{LocalCommID: r.Uint32(), ServiceID: sid(ib.PortSpaceTCP), LocalQPN: r.Uint32() & 0xFFFFFF,
			ResponderResources: uint8(r.Uint32()), InitiatorDepth: uint8(r.Uint32()), StartingPSN: r.Uint32() & 0xFFFFFF,
			PathMTU: uint8(r.IntN(16)), RetryCount: uint8(r.IntN(8)), RNRRetryCount: uint8(r.IntN(8)),
			RemoteCMRespTimeout: uint8(r.IntN(32)), LocalCMRespTimeout: uint8(r.IntN(32)), LocalAckTimeout: uint8(r.IntN(32)),
			MaxCMRetries: uint8(r.IntN(16)), PKey: ib.DefaultPKey}
		if r.IntN(4) == 0 {
			q.TransportType = uint8(r.IntN(4))
		}
		for i := range q.PrivateData {
			q.PrivateData[i] = byte(r.Uint32())
		}
		if r.IntN(3) > 0 {
			ib.PutCMAHdr(q.PrivateData[:], h.from, h.to, uint16(r.Uint32()))
		}
		q.Marshal(m[:], r.Uint64())
	case ib.AttrSIDRReq:
		q := ib.SIDRReq{RequestID: r.Uint32(), PKey: ib.DefaultPKey, ServiceID: sid(ib.PortSpaceUDP)}
		q.Marshal(m[:], r.Uint64(), m[ib.MADHdrLen+16:ib.MADHdrLen+16+ib.SIDRReqPrivLen])
	default:
		ib.PutCMHeader(m[:], attr, r.Uint64())
	}
	if r.IntN(20) == 0 {
		m[r.IntN(ib.MADHdrLen)] ^= byte(1 + r.IntN(255)) // a broken MAD header
	}
	var b ib.Builder
	b.H = make([]byte, 0, 512)
	b.BTH(ib.UDSendOnly, false, 0, ib.DefaultPKey, ib.GSIQPN, false, r.Uint32()&0xFFFFFF)
	qkey := uint32(ib.GSIQKey)
	if r.IntN(30) == 0 {
		qkey = r.Uint32()
	}
	b.DETH(qkey, ib.GSIQPN)
	pkt := append(b.H, m[:]...)
	if r.IntN(30) == 0 {
		pkt = pkt[:len(pkt)-1-r.IntN(200)]
	}
	h.write(t, pkt, false)
}

// TestHostileCM: thousands of forged connection-manager MADs (half as
// many as TestHostilePeer's packets), from the address a real client then
// dials from, at a device with a listener whose application is busy: the
// forged requests fill its backlog before the real one comes. Nothing
// panics; the real request, dropped while the backlog is full, gets in
// when it is sent again after the application starts taking requests
// (rejecting the forged ones); its connection carries data and
// disconnects cleanly.
func TestHostileCM(t *testing.T) {
	leakcheck.Check(t)
	da, db := devices(t)
	addr := fmt.Sprintf("%s:7402", testAddrs[1])
	ln, err := roce.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := conformance.NewSide(t, openDev(t, db), verbs.QPTRC, conformance.PairOpts{})
	var forged atomic.Int64
	accepted := make(chan *roce.Conn, 1)
	acceptErr := make(chan error, 1)
	start := make(chan struct{})
	go func() {
		<-start
		for {
			r, err := ln.Accept(ctx)
			if err != nil {
				acceptErr <- err
				return
			}
			if !bytes.HasPrefix(r.PrivateData(), []byte("real")) {
				forged.Add(1)
				r.Reject([]byte("forged"))
				continue
			}
			c, err := r.Accept(srv.QP, roce.Params{PrivateData: []byte("welcome"), RNRRetry: 7})
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
			return
		}
	}()
	before, _ := roce.DeviceCounters(srv.Ctx.Device().Name())
	for seed := uint64(hostileBase); seed < uint64(hostileBase+hostileSeeds); seed++ {
		h := newHostile(t, testAddrs[0], testAddrs[1], seed)
		for range hostilePackets / 2 {
			h.mad(t, 7402)
		}
	}
	after, _ := roce.DeviceCounters(srv.Ctx.Device().Name())
	if after.Malformed == before.Malformed {
		t.Fatal("no forged MAD was counted as malformed")
	}

	cli := conformance.NewSide(t, openDev(t, da), verbs.QPTRC, conformance.PairOpts{})
	type dialed struct {
		c   *roce.Conn
		err error
	}
	dc := make(chan dialed, 1)
	go func() {
		c, err := roce.Dial(ctx, addr, cli.QP, roce.Params{PrivateData: []byte("real"), RNRRetry: 7}, nil)
		dc <- dialed{c, err}
	}()
	time.Sleep(200 * time.Millisecond) // its first REQ meets the full backlog
	close(start)
	d := <-dc
	if d.err != nil {
		t.Fatal(d.err)
	}
	c := d.c
	var s *roce.Conn
	select {
	case s = <-accepted:
	case err := <-acceptErr:
		t.Fatal(err)
	}
	if forged.Load() == 0 {
		t.Fatal("no forged request reached the listener")
	}
	conformance.Fill(cli.Buf[:64], 3)
	srv.MustPostRecv(t, srv.Recv(1, 0, 64))
	cli.MustPostSend(t, cli.Send(2, 0, 64))
	conformance.ExpectWC(t, conformance.Poll1(t, srv.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
	conformance.ExpectWC(t, conformance.Poll1(t, cli.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	if !bytes.Equal(srv.Buf[:64], cli.Buf[:64]) {
		t.Fatal("the SEND arrived changed")
	}
	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the listener's side did not see the disconnect")
	}
	t.Logf("%d forged requests reached the application (rejected); %d MADs dropped as malformed", forged.Load(), after.Malformed-before.Malformed)
}

// TestHostileUD: forged datagrams at a UD QP (its Q_Key and others, every
// opcode, lengths from nothing to beyond the receive buffers and the MTU,
// bad ICRCs): each one taken completes a receive (GRH and payload, or
// LOC_LEN_ERR when it does not fit), the others are dropped and counted,
// and a real datagram still arrives whole after them.
func TestHostileUD(t *testing.T) {
	leakcheck.Check(t)
	const qkey = 0x1234_5678
	ca, cb := fixture{}.Open(t)
	x := conformance.NewSide(t, ca, verbs.QPTUD, conformance.PairOpts{CQE: 4096})
	y := conformance.NewSide(t, cb, verbs.QPTUD, conformance.PairOpts{})
	for _, s := range []*conformance.Side{x, y} {
		if err := conformance.ActivateUD(s.QP, qkey); err != nil {
			t.Fatal(err)
		}
	}
	const slot = 2048 // a receive: GRH and up to 2008 bytes of payload
	post := func(i int) {
		x.MustPostRecv(t, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{x.MR.SGE((i%16)*slot, slot)}})
	}
	for i := range 16 {
		post(i)
	}
	h := newHostile(t, testAddrs[1], testAddrs[0], uint64(11+hostileBase))
	h.qpn = x.QP.Num()
	before, _ := roce.DeviceCounters(x.Ctx.Device().Name())
	wc := make([]verbs.WC, 64)
	posted, taken := 16, 0
	for i := range hostilePackets {
		r := h.rnd
		op := []ib.Opcode{ib.UDSendOnly, ib.UDSendOnlyImm}[r.IntN(2)]
		if r.IntN(10) == 0 {
			op = hostileOps[r.IntN(len(hostileOps))]
		}
		hl := op.Info().HdrLen
		if hl == 0 {
			hl = ib.BTHLen
		}
		n := r.IntN(2 * slot)
		pkt := make([]byte, hl+n, hl+n+ib.ICRCLen)
		for j := ib.BTHLen; j < len(pkt); j++ {
			pkt[j] = byte(r.Uint32())
		}
		ib.PutBTH(pkt, op, false, r.IntN(4), 0xFFFF, h.qpn, false, r.Uint32()&0xFFFFFF)
		if op.Info().Mask&ib.HasDETH != 0 && r.IntN(5) > 0 {
			binary.BigEndian.PutUint32(pkt[ib.BTHLen:], qkey)
		}
		h.write(t, pkt, r.IntN(50) == 0)
		if i%8 == 0 {
			k, err := x.RecvCQ.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wc[:k] {
				switch {
				case w.Status == verbs.WCSuccess && w.ByteLen >= roce.GRHLen && w.ByteLen <= slot:
				case w.Status == verbs.WCLocLenErr:
				default:
					t.Fatalf("forged datagram %d: receive completed with %v, %d bytes", i, w.Status, w.ByteLen)
				}
				taken++
				post(posted)
				posted++
			}
		}
	}
	time.Sleep(20 * time.Millisecond)
	for {
		k, _ := x.RecvCQ.Poll(wc)
		if k == 0 {
			break
		}
		taken += k
		for range k {
			post(posted)
			posted++
		}
	}
	after, _ := roce.DeviceCounters(x.Ctx.Device().Name())
	if taken == 0 || after.BadICRC == before.BadICRC || after.NoQP+after.Malformed == before.NoQP+before.Malformed {
		t.Fatalf("%d forged datagrams taken; counters %+v -> %+v", taken, before, after)
	}
	// A real datagram after them.
	ah, err := y.PD.CreateAH(fixture{}.AHTo(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	conformance.Fill(y.Buf[:300], 9)
	wr := y.Send(1, 0, 300)
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, x.QP.Num(), qkey
	y.MustPostSend(t, wr)
	w := conformance.Poll1(t, x.RecvCQ)
	if w.Status != verbs.WCSuccess || w.ByteLen != roce.GRHLen+300 {
		t.Fatalf("real datagram: %v, %d bytes", w.Status, w.ByteLen)
	}
	off := int(w.WRID%16) * slot
	if !bytes.Equal(x.Buf[off+roce.GRHLen:off+roce.GRHLen+300], y.Buf[:300]) {
		t.Fatal("real datagram arrived changed")
	}
	t.Logf("%d forged datagrams taken, %d dropped", taken, (after.NoQP+after.Malformed+after.BadICRC)-(before.NoQP+before.Malformed+before.BadICRC))
}
