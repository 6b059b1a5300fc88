package conformance

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func init() {
	register(
		Case{Name: "SendRecv", Run: testSendRecv},
		Case{Name: "RDMAWrite", Run: testRDMAWrite},
		Case{Name: "RDMARead", Run: testRDMARead},
	)
}

func testSendRecv(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(a.Buf[:100], 1)
	b.MustPostRecv(t, b.Recv(11, 1000, 200))
	a.MustPostSend(t, a.Send(22, 0, 100))
	ExpectWC(t, Poll1(t, a.SendCQ), 22, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 11, verbs.WCSuccess, verbs.WCRecv)
	// IBV_WC_GRH is defined for UD only: Linux rxe sets it on RC receives
	// too, which the verbs man page leaves open.
	if wc.ByteLen != 100 || wc.QPNum != b.QP.Num() || wc.Flags&^verbs.WCFlagGRH != 0 {
		t.Fatalf("receive completion %+v: want byte_len 100, qp_num %#x, no flags", wc, b.QP.Num())
	}
	if !bytes.Equal(b.Buf[1000:1100], a.Buf[:100]) {
		t.Fatal("received data differs from the data sent")
	}
}

func testRDMAWrite(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(a.Buf[:4096], 3)
	a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.RemoteAddr(8192), RKey: b.MR.RKey()})
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	// A plain RDMA WRITE consumes no receive and makes no completion at the
	// target. The requester's completion does not say the data has landed
	// (on iWARP it means "handed to TCP"); a later SEND's arrival does,
	// since an RC connection places messages in order.
	b.MustPostRecv(t, b.Recv(3, 0, 8))
	a.MustPostSend(t, a.Send(4, 0, 8))
	ExpectWC(t, Poll1(t, b.RecvCQ), 3, verbs.WCSuccess, verbs.WCRecv)
	if !bytes.Equal(b.Buf[8192:8192+4096], a.Buf[:4096]) {
		t.Fatal("written data differs")
	}
}

func testRDMARead(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(b.Buf[:5000], 9)
	a.MustPostSend(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(100, 5000)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	wc := Poll1(t, a.SendCQ)
	ExpectWC(t, wc, 2, verbs.WCSuccess, verbs.WCRDMARead)
	if wc.ByteLen != 5000 {
		t.Fatalf("read completion byte_len %d, want 5000", wc.ByteLen)
	}
	if !bytes.Equal(a.Buf[100:5100], b.Buf[:5000]) {
		t.Fatal("read data differs")
	}
}
