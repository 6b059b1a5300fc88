package roce_test

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// A list of small requests of one size leaves in one GSO system call
// (engine.Batcher): eight 64-byte WRITEs, all acknowledged, all in place.
func TestListOneSystemCall(t *testing.T) {
	x, y := benchPair(t, 64<<10)
	name := x.Ctx.Device().Name()
	conformance.Fill(x.Buf[:8*64], 31)
	var wrs []verbs.SendWR
	for i := range 8 {
		wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{x.MR.SGE(i*64, 64)}, RemoteAddr: y.MR.RemoteAddr(4096 + i*64), RKey: y.MR.RKey()})
	}
	before, _ := roce.DeviceCounters(name)
	x.MustPostSend(t, wrs...)
	after, _ := roce.DeviceCounters(name)
	for i, wc := range conformance.PollN(t, x.SendCQ, len(wrs)) {
		conformance.ExpectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	// The device's other QPs are idle; a stray datagram of an earlier
	// test's teardown may still go out beside them, never seven.
	if n, sent := after.Writes-before.Writes, after.Sent-before.Sent; n > 2 || sent < 8 {
		t.Errorf("8 WRITEs went out in %d system calls, %d datagrams; want 1 call for 8", n, sent)
	}
	if !bytes.Equal(y.Buf[4096:4096+8*64], x.Buf[:8*64]) {
		t.Fatal("data differs")
	}
}

// A request that fails its checks does not strand the packets that the
// requests before it left in the batch: they still go out.
func TestListBadKeyAfterKept(t *testing.T) {
	x, y := benchPair(t, 64<<10)
	conformance.Fill(x.Buf[:64], 32)
	y.MustPostRecv(t, y.Recv(7, 0, 0))
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 64)},
			RemoteAddr: y.MR.RemoteAddr(8192), RKey: y.MR.RKey(), ImmData: 5},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: x.MR.SGE(0, 64).Addr, Length: 64, LKey: x.MR.LKey() ^ 0x5a5a00}},
			RemoteAddr: y.MR.RemoteAddr(8192), RKey: y.MR.RKey()},
	}
	x.MustPostSend(t, wrs...)
	wcs := conformance.PollN(t, x.SendCQ, 2)
	// The first was sent but not yet acknowledged when the second failed:
	// the QP's error flushes it (as rxe's completer would).
	if wcs[0].WRID != 1 || (wcs[0].Status != verbs.WCWRFlushErr && wcs[0].Status != verbs.WCSuccess) ||
		wcs[1].WRID != 2 || wcs[1].Status != verbs.WCLocProtErr {
		t.Fatalf("completions %+v", wcs)
	}
	// Its immediate's completion says it arrived (and orders the check).
	conformance.ExpectWC(t, conformance.Poll1(t, y.RecvCQ), 7, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if !bytes.Equal(y.Buf[8192:8192+64], x.Buf[:64]) {
		t.Fatal("the WRITE before the failed one did not arrive whole")
	}
}

// A reply to a SEND leaves with the ACK of that SEND in one system call
// (sendmmsg) from the QP's source port, as rxe sends a QP's ACKs: the ACK
// the responder deferred to the application's post goes ahead of the
// reply, not as a system call of its own from port 4791.
func TestReplyCarriesACK(t *testing.T) {
	x, y := benchPair(t, 64<<10)
	name := y.Ctx.Device().Name()
	const rounds = 50
	together := 0
	for i := range rounds {
		y.MustPostRecv(t, y.Recv(uint64(i), 0, 64))
		x.MustPostRecv(t, x.Recv(uint64(i), 0, 64))
		x.MustPostSend(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(4096, 8)}})
		conformance.ExpectWC(t, conformance.Poll1(t, y.RecvCQ), uint64(i), verbs.WCSuccess, verbs.WCRecv)
		before, _ := roce.DeviceCounters(name)
		y.MustPostSend(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{y.MR.SGE(4096, 8)}})
		after, _ := roce.DeviceCounters(name)
		if after.Writes-before.Writes == 1 && after.Sent-before.Sent == 2 {
			together++
		}
		conformance.ExpectWC(t, conformance.Poll1(t, x.RecvCQ), uint64(i), verbs.WCSuccess, verbs.WCRecv)
		conformance.ExpectWC(t, conformance.Poll1(t, x.SendCQ), uint64(i), verbs.WCSuccess, verbs.WCSend)
		conformance.ExpectWC(t, conformance.Poll1(t, y.SendCQ), uint64(i), verbs.WCSuccess, verbs.WCSend)
	}
	// (A round whose ACK the device's goroutine sent before the post, the
	// application having been slow to poll, is not one of them.)
	if together < rounds*3/4 {
		t.Fatalf("the reply and its SEND's ACK left in one system call in %d of %d rounds", together, rounds)
	}
}
