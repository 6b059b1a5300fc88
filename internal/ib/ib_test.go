package ib

import (
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestICRCVector: a SEND_ONLY computed by the lab's reference (Python's
// zlib, the masking of Linux rxe) with IP ID 0x1234 and DF.
func TestICRCVector(t *testing.T) {
	pkt, _ := hex.DecodeString("0430ffff000000118012345668656c6c6f000000")
	want, _ := hex.DecodeString("944b8525")
	src, dst := [4]byte{10, 78, 0, 1}, [4]byte{10, 78, 0, 2}
	got := ICRCv4(src, dst, 49152, 4791, 0x1234, true, pkt)
	var b [4]byte
	PutICRC(b[:], got)
	if string(b[:]) != string(want) {
		t.Fatalf("ICRC %x, want %x", b, want)
	}
	if !CheckICRCv4(src, dst, 49152, 4791, pkt, got) {
		t.Fatal("CheckICRCv4 refuses the packet (unknown IP ID)")
	}
	// The masked fields do not matter; the addresses, ports and data do.
	if CheckICRCv4(src, [4]byte{10, 78, 0, 3}, 49152, 4791, pkt, got) {
		t.Error("accepted for another destination address")
	}
	if CheckICRCv4(src, dst, 49153, 4791, pkt, got) {
		t.Error("accepted for another source port")
	}
	bad := append([]byte(nil), pkt...)
	bad[4] = 0x55 // FECN/BECN byte: masked
	if !CheckICRCv4(src, dst, 49152, 4791, bad, got) {
		t.Error("BTH byte 4 is masked, but changing it broke the check")
	}
}

// TestCheckICRCv4: for random packets, identifications and DF flags the
// check accepts the ICRC; a flipped bit of the packet is refused. One
// Scratch checks them all, as a device's does (its basis for the last
// length is reused: lengths repeat and change).
func TestCheckICRCv4(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src, dst := [4]byte{192, 168, 1, 2}, [4]byte{192, 168, 1, 3}
	s := new(Scratch)
	missed := 0
	for i := range 200 {
		n := BTHLen + 4*r.IntN(300)
		if i%3 == 1 {
			n = BTHLen + 4*64 // often the same length, as a stream's packets
		}
		pkt := make([]byte, n)
		for j := range pkt {
			pkt[j] = byte(r.Uint32())
		}
		id, df := uint16(r.Uint32()), i%2 == 0
		c := ICRCv4(src, dst, 5000, 4791, id, df, pkt)
		if !s.CheckV4(src, dst, 5000, 4791, pkt, c) {
			t.Fatalf("packet %d (%d bytes, id %#x, df %v): good ICRC refused", i, n, id, df)
		}
		j := BTHLen + r.IntN(n-BTHLen+1)
		if j == n {
			j = 0 // the opcode byte
		}
		pkt[j] ^= 1 << r.IntN(8)
		if s.CheckV4(src, dst, 5000, 4791, pkt, c) {
			missed++
		}
	}
	if missed > 1 { // a 2^-15 chance each
		t.Fatalf("%d corrupted packets of 200 passed the check", missed)
	}
}

// TestParseRoundTrip builds a packet of each opcode and parses it back.
func TestParseRoundTrip(t *testing.T) {
	for op := range 256 {
		info := Opcode(op).Info()
		if info.Name == "" {
			continue
		}
		var b Builder
		payload := []byte{}
		if info.Mask&HasPayload != 0 {
			payload = []byte("payload!!")
		}
		pad := Pad(len(payload))
		b.BTH(Opcode(op), true, pad, 0x8001, 0xABCDEF, true, 0xFFFFFE)
		if info.Mask&HasDETH != 0 {
			b.DETH(0x80010000, 0x123456)
		}
		if info.Mask&HasFETH != 0 {
			b.FETH(7)
		}
		if info.Mask&HasRETH != 0 {
			b.RETH(0x1122334455667788, 0x99AABBCC, 4096)
		}
		if info.Mask&HasAtomicETH != 0 {
			b.AtomicETH(0x10, 0x20, 0x30, 0x40)
		}
		if info.Mask&HasAETH != 0 {
			b.AETH(SyndromeNAK|NAKRemAccess, 0x654321)
		}
		if info.Mask&HasAtomicAck != 0 {
			b.AtomicAck(0xDEADBEEF)
		}
		if info.Mask&(HasImm|HasIETH) != 0 {
			b.Imm(0xCAFEF00D)
		}
		if len(b.H) != info.HdrLen {
			t.Fatalf("%v: built %d header bytes, want %d", Opcode(op), len(b.H), info.HdrLen)
		}
		pkt := append(append(b.H, payload...), make([]byte, pad)...)
		var p Packet
		if err := Parse(pkt, &p); err != nil {
			t.Fatalf("%v: %v", Opcode(op), err)
		}
		if p.Op != Opcode(op) || !p.SE || !p.AckReq || p.PKey != 0x8001 || p.DestQP != 0xABCDEF || p.PSN != 0xFFFFFE ||
			string(p.Payload) != string(payload) {
			t.Fatalf("%v: parsed %+v", Opcode(op), p)
		}
		if info.Mask&HasRETH != 0 && (p.VA != 0x1122334455667788 || p.RKey != 0x99AABBCC || p.DMALen != 4096) {
			t.Errorf("%v: RETH %+v", Opcode(op), p)
		}
		if info.Mask&HasAETH != 0 && (p.Syndrome != SyndromeNAK|NAKRemAccess || p.MSN != 0x654321) {
			t.Errorf("%v: AETH %+v", Opcode(op), p)
		}
		if info.Mask&HasDETH != 0 && (p.QKey != 0x80010000 || p.SrcQP != 0x123456) {
			t.Errorf("%v: DETH %+v", Opcode(op), p)
		}
		if info.Mask&(HasImm|HasIETH) != 0 && p.Imm != 0xCAFEF00D {
			t.Errorf("%v: imm %#x", Opcode(op), p.Imm)
		}
		if info.Mask&HasAtomicETH != 0 && (p.VA != 0x10 || p.RKey != 0x20 || p.SwapAdd != 0x30 || p.Compare != 0x40) {
			t.Errorf("%v: AtomicETH %+v", Opcode(op), p)
		}
		if info.Mask&HasAtomicAck != 0 && p.Orig != 0xDEADBEEF {
			t.Errorf("%v: AtomicAckETH %#x", Opcode(op), p.Orig)
		}
		// Every truncation is refused, none panics.
		for n := range len(pkt) - pad - len(payload) {
			if err := Parse(pkt[:n], &p); err == nil && n < info.HdrLen {
				t.Fatalf("%v: %d bytes accepted", Opcode(op), n)
			}
		}
	}
}

func TestPSN(t *testing.T) {
	for _, c := range []struct {
		a, b uint32
		d    int32
	}{{5, 3, 2}, {3, 5, -2}, {0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1}, {0x7FFFFF, 0, 0x7FFFFF}, {0x800000, 0, -0x800000}} {
		if got := PSNDiff(c.a, c.b); got != c.d {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
	if PSNAdd(0xFFFFFF, 2) != 1 || PSNAdd(0, -1) != 0xFFFFFF {
		t.Error("PSNAdd does not wrap")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("0430ffff000000118012345668656c6c6f000000"))
	f.Add(make([]byte, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if Parse(b, &p) == nil {
			if len(p.Payload) > len(b) || p.Op.Info().Name == "" {
				t.Fatalf("parsed %+v from %d bytes", p, len(b))
			}
		}
	})
}

// TestICRCSplit: an ICRC started over a packet's first bytes and carried
// over the rest in pieces (a payload sent in place) is the packet's, and
// a Scratch that remembers header CRCs across packets of several lengths,
// identifications and sources gives every one its own.
func TestICRCSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src, dst := [4]byte{10, 78, 0, 1}, [4]byte{10, 78, 0, 2}
	var s6, d6 [16]byte
	s6[15], d6[15] = 1, 2
	var s Scratch // one, as a sender keeps it: its remembered header CRCs must follow
	// A stream repeats the BTH's first 8 bytes, its PSN counting: most
	// packets take them from head, which changes now and then.
	head := [8]byte{0x07, 0, 0xFF, 0xFF, 0, 0, 0x12, 0x34}
	for range 600 {
		id := uint16(r.IntN(40))
		if r.IntN(2) == 0 {
			src[3] ^= 1 // another source now and then
		}
		pkt := make([]byte, BTHLen+r.IntN(3)*r.IntN(5000))
		for i := range pkt {
			pkt[i] = byte(r.Uint32())
		}
		switch r.IntN(4) {
		case 0: // random
		case 1:
			head[r.IntN(8)] = byte(r.Uint32())
			fallthrough
		default:
			copy(pkt, head[:])
			pkt[4] = byte(r.Uint32()) // masked: must not matter
		}
		h := BTHLen + r.IntN(len(pkt)-BTHLen+1)
		m := h + r.IntN(len(pkt)-h+1)
		c := s.Start4(src, dst, 49152, 4791, id, true, len(pkt), pkt[:h])
		c = UpdateICRC(UpdateICRC(c, pkt[h:m]), pkt[m:])
		if want := ICRCv4(src, dst, 49152, 4791, id, true, pkt); c != want {
			t.Fatalf("v4 split at %d, %d of %d: %08x, want %08x", h, m, len(pkt), c, want)
		}
		c = s.Start6(s6, d6, 49152, 4791, len(pkt), pkt[:h])
		c = UpdateICRC(UpdateICRC(c, pkt[h:m]), pkt[m:])
		if want := ICRCv6(s6, d6, 49152, 4791, pkt); c != want {
			t.Fatalf("v6 split at %d, %d of %d: %08x, want %08x", h, m, len(pkt), c, want)
		}
		if c, want := s.V4(src, dst, 49152, 4791, id, false, pkt), ICRCv4(src, dst, 49152, 4791, id, false, pkt); c != want {
			t.Fatalf("V4 of %d bytes, id %d: %08x, want %08x", len(pkt), id, c, want)
		}
	}
}

// BenchmarkICRCPacket: the ICRC of a 4 KiB packet of a stream, as a
// sender computes it (headers, then the payload in place).
func BenchmarkICRCPacket(b *testing.B) {
	var s Scratch
	pkt := make([]byte, BTHLen+4096)
	pkt[0] = byte(WriteMiddle)
	src, dst := [4]byte{127, 0, 0, 2}, [4]byte{127, 0, 0, 1}
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		pkt[11] = byte(i) // the PSN counts
		c := s.Start4(src, dst, 49152, UDPPort, uint16(i%15), true, len(pkt), pkt[:BTHLen])
		_ = UpdateICRC(c, pkt[BTHLen:])
	}
}
