package roce_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// A QP's packets leave from a UDP source port of its own, the flow's
// entropy, and keep it; the destination port is 4791 and the ICRC covers
// the source port the packet really has. QPs spread over several ports.
func TestSourcePortEntropy(t *testing.T) {
	// A bare UDP socket stands for the peer: the packets are read as a
	// switch would see them.
	peerAddr := netip.AddrFrom4([4]byte{127, testAddrs[0].As4()[1], testAddrs[0].As4()[2], 9})
	peer, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, ib.UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ca, _ := fixture{}.Open(t)
	o := conformance.PairOpts{BufSize: 64, NoConnect: true, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	ports := map[uint16]bool{}
	for i := range 16 {
		s := conformance.NewSide(t, ca, verbs.QPTRC, o)
		steps := []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: 0x100 + uint32(i),
				AHAttr: verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: ib.GIDOf(peerAddr), HopLimit: 64}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
			{verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 20, RetryCnt: 0}, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := s.QP.Modify(&st.a, st.m); err != nil {
				t.Fatal(err)
			}
		}
		var port uint16
		for j := range 2 {
			s.MustPostSend(t, verbs.SendWR{WRID: uint64(j), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.MR.SGE(0, 8)}})
			buf := make([]byte, 2048)
			peer.SetReadDeadline(time.Now().Add(conformance.WaitTimeout))
			n, from, err := peer.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("QP %d: no packet reached the peer: %v", i, err)
			}
			pkt := buf[:n]
			if from.Port() == ib.UDPPort {
				t.Fatalf("QP %d: packet from port 4791, want a port of the QP's own", i)
			}
			if j == 1 && from.Port() != port {
				t.Fatalf("QP %d: second packet from port %d, first from %d", i, from.Port(), port)
			}
			port = from.Port()
			body, icrc := pkt[:n-ib.ICRCLen], binary.LittleEndian.Uint32(pkt[n-ib.ICRCLen:])
			if !ib.CheckICRCv4(from.Addr().As4(), peerAddr.As4(), from.Port(), ib.UDPPort, body, icrc) {
				t.Fatalf("QP %d: the ICRC does not cover source port %d", i, from.Port())
			}
		}
		ports[port] = true
	}
	if len(ports) < 2 {
		t.Fatalf("16 QPs sent from %d source port(s), want them spread", len(ports))
	}
}
