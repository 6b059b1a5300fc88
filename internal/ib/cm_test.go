package ib

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"
)

// capturedIPv4 returns the IPv4 packets of a pcap file (Ethernet frames).
func capturedIPv4(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 {
		t.Fatal("not a little-endian pcap file")
	}
	var out [][]byte
	for o := 24; o+16 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[o+8:]))
		o += 16
		if o+n > len(b) {
			break
		}
		f := b[o : o+n]
		o += n
		if len(f) > 34 && binary.BigEndian.Uint16(f[12:]) == 0x0800 {
			ip := f[14:]
			out = append(out, ip[:binary.BigEndian.Uint16(ip[2:])])
		}
	}
	return out
}

// TestCapturedRxeCM: the CM messages Linux rxe (kernel 6.1, in the lab)
// sent for an rping client: their ICRCs check (rxe chooses a hashed IP
// identification, which the check does not need to know) and their REQ
// and REJ decode to what rping asked for.
func TestCapturedRxeCM(t *testing.T) {
	pkts := capturedIPv4(t, "testdata/rxe_cm_req.pcap")
	seen := 0
	for _, ip := range pkts {
		if ip[9] != 17 {
			continue
		}
		udp := ip[20:]
		if binary.BigEndian.Uint16(udp[2:]) != UDPPort {
			continue
		}
		src, dst := [4]byte(ip[12:16]), [4]byte(ip[16:20])
		pkt := udp[8:]
		body, crc := pkt[:len(pkt)-ICRCLen], GetICRC(pkt[len(pkt)-ICRCLen:])
		if !CheckICRCv4(src, dst, binary.BigEndian.Uint16(udp), UDPPort, body, crc) {
			t.Fatalf("ICRC of a captured packet (IP ID %#x) refused", binary.BigEndian.Uint16(ip[4:]))
		}
		if got := ICRCv4(src, dst, binary.BigEndian.Uint16(udp), UDPPort, binary.BigEndian.Uint16(ip[4:]), ip[6]&0x40 != 0, body); got != crc {
			t.Fatalf("ICRC %#x, captured %#x", got, crc)
		}
		var p Packet
		if err := Parse(body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Op != UDSendOnly || p.DestQP != GSIQPN || p.QKey != GSIQKey || p.SrcQP != GSIQPN || len(p.Payload) != MADLen {
			t.Fatalf("not a MAD to QP1: %+v", p)
		}
		m := MAD(p.Payload)
		if err := CheckCM(m); err != nil {
			t.Fatal(err)
		}
		switch m.AttrID() {
		case AttrREQ:
			var r REQ
			r.Unmarshal(m)
			ps, port, ok := ServicePort(r.ServiceID)
			if !ok || ps != PortSpaceTCP || port != 7176 {
				t.Errorf("service ID %#x", r.ServiceID)
			}
			if r.LocalQPN != 0x11 || r.ResponderResources != 1 || r.InitiatorDepth != 1 || r.PathMTU != 3 || r.RNRRetryCount != 7 ||
				r.RetryCount != 7 || r.PKey != 0xFFFF || r.HopLimit != 64 || r.LocalAckTimeout != 19 || r.StartingPSN != 0xcccaac {
				t.Errorf("REQ %+v", r)
			}
			if AddrOfGID(r.LocalGID) != netip.MustParseAddr("10.78.0.2") || AddrOfGID(r.RemoteGID) != netip.MustParseAddr("10.78.0.1") {
				t.Errorf("GIDs %x %x", r.LocalGID, r.RemoteGID)
			}
			s, d, sport, ok := CMAHdr(r.PrivateData[:])
			if !ok || s != netip.MustParseAddr("10.78.0.2") || d != netip.MustParseAddr("10.78.0.1") || sport == 0 {
				t.Errorf("cma header: %v %v %d %v", s, d, sport, ok)
			}
			// Marshal gives back the same bytes.
			var again [MADLen]byte
			r.Marshal(again[:], m.TID())
			if string(again[MADHdrLen:]) != string(m[MADHdrLen:MADLen]) {
				t.Errorf("REQ re-marshalled differs:\n%x\n%x", again[MADHdrLen:], m[MADHdrLen:MADLen])
			}
			seen++
		case AttrREJ:
			if msg, reason := REJReason(m); reason != RejTimeout {
				t.Errorf("REJ of message %d, reason %d", msg, reason)
			}
			seen++
		}
	}
	if seen != 3 {
		t.Fatalf("%d CM messages decoded, want 3 (two REQs, a REJ)", seen)
	}
}

func TestCMRoundTrip(t *testing.T) {
	var m [MADLen]byte
	rep := REP{LocalCommID: 1, RemoteCommID: 2, LocalQPN: 0xABCDEF, StartingPSN: 0x123456, ResponderResources: 3, InitiatorDepth: 4,
		TargetAckDelay: 15, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x1122334455667788}
	copy(rep.PrivateData[:], "private")
	rep.Marshal(m[:], 99)
	if CheckCM(m[:]) != nil || MAD(m[:]).AttrID() != AttrREP || MAD(m[:]).TID() != 99 {
		t.Fatal("header")
	}
	var got REP
	got.Unmarshal(m[:])
	if got != rep {
		t.Fatalf("REP %+v, want %+v", got, rep)
	}
	PutREJ(m[:], 5, 7, 8, RejMsgREQ, RejConsumer, []byte("no"))
	if msg, r := REJReason(m[:]); msg != RejMsgREQ || r != RejConsumer || string(Private(m[:], AttrREJ)[:2]) != "no" {
		t.Fatal("REJ")
	}
	PutMRA(m[:], 5, 7, 8, 1, 20)
	if msg, to := MRATimeout(m[:]); msg != 1 || to != 20 {
		t.Fatal("MRA")
	}
	PutDREQ(m[:], 5, 7, 8, 0x123456, nil)
	if DREQQPN(m[:]) != 0x123456 {
		t.Fatal("DREQ")
	}
	var pd [CMAHdrLen]byte
	PutCMAHdr(pd[:], netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2"), 999)
	if s, d, p, ok := CMAHdr(pd[:]); !ok || s.String() != "fe80::1" || d.String() != "fe80::2" || p != 999 {
		t.Fatal("cma header v6")
	}
}

func FuzzCM(f *testing.F) {
	f.Add(make([]byte, MADLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckCM(b) != nil {
			return
		}
		var r REQ
		r.Unmarshal(b)
		var p REP
		p.Unmarshal(b)
		_ = Private(b, MAD(b).AttrID())
		REJReason(b)
		CMAHdr(r.PrivateData[:])
	})
}
