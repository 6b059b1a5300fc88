package wire

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzParseMPA(f *testing.F) {
	f.Add(unhex(f, rpingRequest))
	f.Add(unhex(f, "4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65 30 02 00 00"))
	f.Add(unhex(f, "4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65 D0 02 00 06 C0 05 80 07 41 42"))
	f.Add(unhex(f, "4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65 40 01 00 02 41 42"))
	f.Add(unhex(f, "4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65 10 02 00 02 00 01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		reply, flags, rev, pd, herr := ParseMPAHeader(data)
		fr, err := ParseMPA(data)
		if herr != nil && !errors.Is(err, herr) {
			t.Fatalf("header error %v, frame error %v", herr, err)
		}
		if err == nil || errors.Is(err, ErrMPAEnhancedShort) {
			if fr.Reply != reply || fr.Flags() != flags || fr.Rev != rev || fr.PDLen() != pd {
				t.Fatalf("header %v %#x %d %d, frame %+v", reply, flags, rev, pd, fr)
			}
		}
		if err == nil {
			out, err := AppendMPA(nil, &fr)
			if err != nil {
				t.Fatalf("re-encode: %v (%+v)", err, fr)
			}
			if !bytes.Equal(out, data) {
				t.Fatalf("round trip\n% X\n% X", out, data)
			}
		}
		if err != nil && !errors.Is(err, ErrMPAEnhancedShort) {
			return
		}
		// The negotiation rules accept whatever parses, and what they build encodes.
		l := Local{IRD: 4, ORD: 4, Private: []byte("x")}
		rep, _, nerr := NegotiateResponder(fr, l)
		if errors.Is(err, ErrMPAEnhancedShort) && !fr.Reply && !errors.Is(nerr, ErrMPAEnhancedShort) {
			t.Fatalf("short enhanced request not rejected: %v", nerr)
		}
		if rep.Reply {
			if _, err := AppendMPA(nil, &rep); err != nil {
				t.Fatalf("responder reply does not encode: %v (%+v)", err, rep)
			}
		}
		if fr.Reply {
			sent, _ := NewRequest(l)
			if n, err := NegotiateInitiator(sent, fr, l); err == nil && (n.IRD > MPAMaxIRDORD || n.ORD > l.max()) {
				t.Fatalf("negotiated %+v", n)
			}
		}
		if rj, ok := RejectReply(fr, nil); ok {
			if _, err := AppendMPA(nil, &rj); err != nil {
				t.Fatalf("reject reply does not encode: %v", err)
			}
		}
	})
}

func FuzzHeader(f *testing.F) {
	seed := func(b []byte) []byte { return append([]byte(nil), b...) }
	hdr := make([]byte, ReadRequestLen)
	PutReadRequest(hdr, 1, &ReadRequestFields{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5})
	f.Add(seed(hdr), uint8(1), true, uint32(1), uint64(2), uint32(1), uint32(1), uint32(0), uint16(46))
	PutTagged(hdr, OpWrite, true, 0xABCD00, 0x7F00, 14+64)
	f.Add(seed(hdr[:16]), uint8(0), false, uint32(7), uint64(1<<40), uint32(0), uint32(0), uint32(0), uint16(78))
	tm := TerminateFor(1, TermDDPTagged(DDPTagInvalidSTag), Header(hdr[:16]))
	term, _ := AppendTerminate(nil, &tm)
	f.Add(term, uint8(7), true, uint32(0), uint64(0), uint32(2), uint32(1), uint32(0), uint16(22))
	f.Add([]byte{0, 18, 0x41, 0x43}, uint8(3), false, uint32(0), uint64(0), uint32(0), uint32(1), uint32(1424), uint16(1442))
	f.Add([]byte{}, uint8(10), true, uint32(0), uint64(0), uint32(1), uint32(1), uint32(0), uint16(70))
	f.Fuzz(func(t *testing.T, data []byte, op uint8, last bool, stag uint32, to uint64, qn, msn, mo uint32, ulpdu uint16) {
		// Arbitrary bytes: nothing panics.
		h := Header(data)
		_ = h.ULPDULen() + h.Len() + int(h.DDPVersion()) + int(h.RDMAPVersion())
		_, _, _ = h.Tagged(), h.Last(), h.Opcode()
		_, _, _, _, _, _ = h.STag(), h.TO(), h.InvSTag(), h.QN(), h.MSN(), h.MO()
		_ = h.DDP()
		_ = h.ReadRequest().Fields()
		_ = h.AtomicRequest().Fields()
		_ = h.AtomicResponse().Fields()
		_ = h.Immediate().Value()
		ti, terr := ParseTerminate(h)
		if terr == nil {
			_, _ = ti.RFC.Cause.String(), ti.Swapped.Cause.String()
		}
		for _, ext := range []bool{false, true} {
			te := Check(h, ext)
			if te != nil {
				_ = te.Error()
				tm := TerminateFor(1, *te, h)
				if _, err := AppendTerminate(nil, &tm); err != nil {
					t.Fatalf("Terminate for %v does not encode: %v", te, err)
				}
				continue
			}
			n, err := HeaderLen(data[2], data[3])
			if err != nil {
				t.Fatalf("Check passed, HeaderLen %v", err)
			}
			if fixed, exact := h.Opcode().fixedLen(); n != fixed || exact && h.ULPDULen()+2 != n || h.ULPDULen()+2 < min(n, UntaggedHeaderLen) {
				t.Fatalf("HeaderLen %d for %v, ULPDU %d", n, h.Opcode(), h.ULPDULen())
			}
			// A valid header with zero reserved bits re-encodes to itself.
			if data[2]&0x3C == 0 && data[3]&0x30 == 0 {
				b := make([]byte, UntaggedHeaderLen)
				if h.Tagged() {
					PutTagged(b, h.Opcode(), h.Last(), h.STag(), h.TO(), h.ULPDULen())
					b = b[:TaggedHeaderLen]
				} else {
					PutUntagged(b, h.Opcode(), h.Last(), h.InvSTag(), h.QN(), h.MSN(), h.MO(), h.ULPDULen())
				}
				if !bytes.Equal(b, data[:len(b)]) {
					t.Fatalf("re-encode\n% X\n% X", b, data[:len(b)])
				}
			}
		}

		// Encoded fields come back.
		opc := Opcode(op & CtrlOpMask)
		b := make([]byte, UntaggedHeaderLen)
		if opc.Tagged() {
			PutTagged(b, opc, last, stag, to, int(ulpdu))
			g := Header(b[:TaggedHeaderLen])
			if !g.Tagged() || g.Last() != last || g.Opcode() != opc || g.STag() != stag || g.TO() != to ||
				g.ULPDULen() != int(ulpdu) || g.DDPVersion() != 1 || g.RDMAPVersion() != 1 {
				t.Fatalf("tagged round trip % X", b)
			}
		} else {
			PutUntagged(b, opc, last, stag, qn, msn, mo, int(ulpdu))
			g := Header(b)
			if g.Tagged() || g.Last() != last || g.Opcode() != opc || g.InvSTag() != stag || g.QN() != qn ||
				g.MSN() != msn || g.MO() != mo || g.ULPDULen() != int(ulpdu) || g.DDPVersion() != 1 || g.RDMAPVersion() != 1 {
				t.Fatalf("untagged round trip % X", b)
			}
		}
		if n, err := HeaderLen(b[2], b[3]); opc.Known(true) != (err == nil) || n < TaggedHeaderLen {
			t.Fatalf("HeaderLen(%02X %02X) = %d, %v", b[2], b[3], n, err)
		}

		// Terminates round trip in RFC order.
		cause := TermError{Layer: Layer(op >> 4), EType: uint8(stag) & 0xF, Code: uint8(stag >> 8)}
		var off Header
		if len(data) > 0 {
			off = h
		}
		tm := TerminateFor(msn, cause, off)
		tb, err := AppendTerminate(nil, &tm)
		if err != nil {
			t.Fatal(err)
		}
		if len(tb) != MPALenLen+tm.ULPDULen() || Header(tb).ULPDULen() != tm.ULPDULen() {
			t.Fatalf("terminate length %d, ULPDU %d", len(tb), tm.ULPDULen())
		}
		if Check(Header(tb), false) != nil {
			t.Fatalf("own Terminate fails Check: %v", Check(Header(tb), false))
		}
		got, err := ParseTerminate(Header(tb))
		if err != nil || got.MSN != msn || got.QN != 2 || got.RFC.Cause != cause ||
			got.RFC.M != tm.SegLenValid || got.RFC.D != (tm.DDPHdr != nil) || got.RFC.R != (tm.RDMAPHdr != nil) {
			t.Fatalf("terminate round trip %+v vs %+v", got, tm)
		}
		if tm.DDPHdr != nil && (!bytes.Equal(got.DDPHdr, tm.DDPHdr) || got.SegLen != tm.SegLen) {
			t.Fatalf("attached DDP header % X vs % X", got.DDPHdr, tm.DDPHdr)
		}
		if !bytes.Equal(got.RDMAPHdr, tm.RDMAPHdr) {
			t.Fatalf("attached RDMAP header % X vs % X", got.RDMAPHdr, tm.RDMAPHdr)
		}
	})
}
