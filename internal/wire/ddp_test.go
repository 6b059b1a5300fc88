package wire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestCtrlBytes(t *testing.T) {
	// docs/iwarp-wire.md sections 5 and 6.1.
	for _, c := range []struct {
		op     Opcode
		last   bool
		c0, c1 byte
	}{
		{OpWrite, true, 0xC1, 0x40}, {OpWrite, false, 0x81, 0x40},
		{OpReadRequest, true, 0x41, 0x41},
		{OpReadResponse, true, 0xC1, 0x42}, {OpReadResponse, false, 0x81, 0x42},
		{OpSend, true, 0x41, 0x43}, {OpSend, false, 0x01, 0x43},
		{OpSendInv, true, 0x41, 0x44}, {OpSendSE, true, 0x41, 0x45}, {OpSendSEInv, true, 0x41, 0x46},
		{OpTerminate, true, 0x41, 0x47},
		{OpImmediate, true, 0x41, 0x48}, {OpImmediateSE, true, 0x41, 0x49},
		{OpAtomicRequest, true, 0x41, 0x4A}, {OpAtomicResponse, true, 0x41, 0x4B},
	} {
		c0, c1 := Ctrl(c.op, c.last)
		if c0 != c.c0 || c1 != c.c1 {
			t.Errorf("%v last=%v: %02X %02X, want %02X %02X", c.op, c.last, c0, c1, c.c0, c.c1)
		}
	}
}

func TestOpcode(t *testing.T) {
	for op := Opcode(0); op < 16; op++ {
		qn, ok := op.QN()
		switch {
		case op == OpWrite || op == OpReadResponse:
			if !op.Tagged() || ok {
				t.Errorf("%v", op)
			}
		case op <= OpAtomicResponse:
			if op.Tagged() || !ok {
				t.Errorf("%v", op)
			}
		default:
			if ok || op.Known(true) || op.String() != fmt.Sprintf("Opcode(%d)", op) {
				t.Errorf("%v: %v %v", op, ok, op.Known(true))
			}
		}
		if op.Known(false) != (op <= 7) || op.Ext() != (op >= 8 && op <= 11) {
			t.Errorf("%v: Known/Ext", op)
		}
		if !ok && qn != 0 {
			t.Errorf("%v: QN %d without a queue", op, qn)
		}
	}
	for op, qn := range map[Opcode]uint32{
		OpSend: 0, OpSendInv: 0, OpSendSE: 0, OpSendSEInv: 0, OpImmediate: 0, OpImmediateSE: 0,
		OpReadRequest: 1, OpAtomicRequest: 1, OpTerminate: 2, OpAtomicResponse: 3,
	} {
		if got, _ := op.QN(); got != qn {
			t.Errorf("%v: QN %d, want %d", op, got, qn)
		}
	}
	if OpSendSEInv.String() != "SendSEInv" || OpAtomicResponse.String() != "AtomicResponse" {
		t.Error("String")
	}
}

// docs/iwarp-wire.md section 10: the rping client's info Send, MSN 1.
func TestSendBytes(t *testing.T) {
	info := unhex(t, "0000 7F00 1234 5678  AABB CC00  0000 0040")
	hdr := make([]byte, UntaggedHeaderLen)
	PutUntagged(hdr, OpSend, true, 0, QNSend, 1, 0, UntaggedDDPLen+len(info))
	fpdu := FinishFPDU(append(hdr, info...), 0, false)
	want := unhex(t, `00 22 | 41 43 | 00 00 00 00 | 00 00 00 00 | 00 00 00 01 | 00 00 00 00 |
		0000 7F00 1234 5678  AABB CC00  0000 0040 | 00 00 00 00`)
	if !bytes.Equal(fpdu, want) || len(fpdu) != 40 {
		t.Fatalf("Send\n% X\n% X", fpdu, want)
	}
	h := Header(fpdu)
	if h.ULPDULen() != 34 || h.Tagged() || !h.Last() || h.DDPVersion() != 1 || h.RDMAPVersion() != 1 ||
		h.Opcode() != OpSend || h.InvSTag() != 0 || h.QN() != 0 || h.MSN() != 1 || h.MO() != 0 || h.Len() != 20 {
		t.Fatal("accessors")
	}
	if Check(h, false) != nil {
		t.Fatal(Check(h, false))
	}
}

// docs/iwarp-wire.md section 10: the server's Read Request, QN 1, MSN 1,
// ULPDU_Length 46 = 0x002E.
func TestReadRequestBytes(t *testing.T) {
	f := ReadRequestFields{SinkSTag: 0x00ABCD00, SinkTO: 0x00007F0011223344, Size: 0x40,
		SrcSTag: 0x00123400, SrcTO: 0x00007F0055667788}
	b := make([]byte, ReadRequestLen)
	PutReadRequest(b, 1, &f)
	fpdu := AppendTrailer(b, 0, 0)
	want := unhex(t, `00 2E | 41 41 | 00000000 | 00000001 | 00000001 | 00000000 |
		00ABCD00 00007F0011223344 00000040 00123400 00007F0055667788 | 00000000`)
	if !bytes.Equal(fpdu, want) || len(fpdu) != 52 {
		t.Fatalf("Read Request\n% X\n% X", fpdu, want)
	}
	h := Header(fpdu)
	if h.Len() != ReadRequestLen || h.ULPDULen() != 46 || h.QN() != 1 || h.MSN() != 1 {
		t.Fatal("header")
	}
	if got := h.ReadRequest().Fields(); got != f {
		t.Fatalf("fields %+v", got)
	}
	if Check(h, false) != nil {
		t.Fatal(Check(h, false))
	}
}

// docs/iwarp-wire.md section 10: a 64-byte Read Response and Write, and a
// 65-byte payload that needs pad 3.
func TestTaggedBytes(t *testing.T) {
	data := bytes.Repeat([]byte{0x5A}, 64)
	for _, c := range []struct {
		op Opcode
		c1 string
	}{{OpReadResponse, "42"}, {OpWrite, "40"}} {
		hdr := make([]byte, TaggedHeaderLen)
		PutTagged(hdr, c.op, true, 0x00ABCD00, 0x00007F0011223344, TaggedDDPLen+len(data))
		fpdu := FinishFPDU(append(hdr, data...), 0, false)
		want := append(unhex(t, "00 4E | C1 "+c.c1+" | 00ABCD00 00007F0011223344"), data...)
		want = append(want, 0, 0, 0, 0)
		if !bytes.Equal(fpdu, want) || len(fpdu) != 84 {
			t.Fatalf("%v\n% X\n% X", c.op, fpdu, want)
		}
		h := Header(fpdu)
		if !h.Tagged() || !h.Last() || h.STag() != 0x00ABCD00 || h.TO() != 0x00007F0011223344 ||
			h.Opcode() != c.op || h.Len() != 16 || Check(h, false) != nil {
			t.Fatalf("%v accessors", c.op)
		}
	}
	hdr := make([]byte, TaggedHeaderLen)
	PutTagged(hdr, OpWrite, false, 1, 2, TaggedDDPLen+65)
	fpdu := FinishFPDU(append(hdr, bytes.Repeat([]byte{1}, 65)...), 0, false)
	if fpdu[0] != 0 || fpdu[1] != 79 || fpdu[2] != 0x81 || len(fpdu) != 2+79+3+4 {
		t.Fatalf("65-byte payload: % X", fpdu[:4])
	}
	// A zero-length Write RTR: STag 1, TO 0, no payload.
	PutTagged(hdr, OpWrite, true, 1, 0, TaggedDDPLen)
	if !bytes.Equal(hdr, unhex(t, "000E C140 00000001 0000000000000000")) {
		t.Fatalf("Write RTR % X", hdr)
	}
}

func TestPutUntaggedFields(t *testing.T) {
	b := make([]byte, UntaggedHeaderLen)
	PutUntagged(b, OpSendSEInv, false, 0xDEADBE00, 0, 7, 1424, 1442)
	if !bytes.Equal(b, unhex(t, "05A2 0146 DEADBE00 00000000 00000007 00000590")) {
		t.Fatalf("% X", b)
	}
	h := Header(b)
	if h.InvSTag() != 0xDEADBE00 || h.MSN() != 7 || h.MO() != 1424 || h.Last() || h.Opcode() != OpSendSEInv {
		t.Fatal("accessors")
	}
	for _, f := range []func(){
		func() { PutUntagged(make([]byte, 19), OpSend, true, 0, 0, 1, 0, 18) },
		func() { PutTagged(make([]byte, 15), OpWrite, true, 0, 0, 14) },
		func() { PutTagged(make([]byte, 16), OpWrite, true, 0, 0, 65536) },
		func() { PutUntagged(make([]byte, 20), OpSend, true, 0, 0, 1, 0, -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

func TestHeaderLen(t *testing.T) {
	unexpected := TermRDMAP(RDMAPRemoteOperation, RDMAPUnexpectedOpcode)
	for _, c := range []struct {
		c0, c1 byte
		n      int
		term   *TermError
	}{
		{0xC1, 0x40, 16, nil}, {0x81, 0x42, 16, nil},
		{0x41, 0x41, 48, nil}, {0x41, 0x43, 20, nil}, {0x01, 0x44, 20, nil}, {0x41, 0x45, 20, nil},
		{0x41, 0x46, 20, nil}, {0x41, 0x47, 24, nil},
		{0x41, 0x48, 28, nil}, {0x41, 0x49, 28, nil}, {0x41, 0x4A, 72, nil}, {0x41, 0x4B, 32, nil},
		// Reserved bits are not checked.
		{0x41 | 0x3C, 0x43 | 0x30, 20, nil},
		// Bad DDP version: etype by the T bit.
		{0x42, 0x43, 20, &TermError{Layer: LayerDDP, EType: 2, Code: 0x06}},
		{0xC0, 0x40, 16, &TermError{Layer: LayerDDP, EType: 1, Code: 0x04}},
		// Bad RDMAP version.
		{0x41, 0x83, 20, &TermError{Layer: LayerRDMAP, EType: 2, Code: 0x05}},
		{0x41, 0x03, 20, &TermError{Layer: LayerRDMAP, EType: 2, Code: 0x05}},
		// Unknown opcodes: length by the T bit.
		{0x41, 0x4C, 20, &unexpected}, {0xC1, 0x4F, 16, &unexpected},
		// T contradicting the opcode: length by the opcode.
		{0xC1, 0x41, 48, &unexpected}, {0x41, 0x40, 16, &unexpected},
	} {
		n, err := HeaderLen(c.c0, c.c1)
		if n != c.n {
			t.Errorf("%02X %02X: n %d, want %d", c.c0, c.c1, n, c.n)
		}
		if c.term == nil {
			if err != nil {
				t.Errorf("%02X %02X: %v", c.c0, c.c1, err)
			}
			continue
		}
		var te *TermError
		if !errors.As(err, &te) || *te != *c.term {
			t.Errorf("%02X %02X: err %v, want %v", c.c0, c.c1, err, c.term)
		}
	}
}

func TestHeaderShort(t *testing.T) {
	// Accessors on short views read zero and never panic.
	for n := 0; n < 20; n++ {
		h := Header(bytes.Repeat([]byte{0xFF}, n))
		_ = h.ULPDULen() + int(h.STag()) + int(h.TO()) + int(h.QN()) + int(h.MSN()) + int(h.MO()) + h.Len()
		_ = h.DDP()
		_ = h.ReadRequest().Fields()
		if n < 8 && h.STag() != 0 || n < 16 && h.TO() != 0 || n < 20 && h.MO() != 0 {
			t.Errorf("len %d: non-zero field", n)
		}
		if h.ReadRequest() != nil || h.AtomicRequest() != nil || h.AtomicResponse() != nil || h.Immediate() != nil {
			t.Errorf("len %d: body view", n)
		}
	}
	if Header(make([]byte, 16)).DDP() != nil {
		t.Error("untagged DDP on 16 bytes")
	}
	tagged := make([]byte, 16)
	tagged[2] = 0xC1
	if d := Header(tagged).DDP(); len(d) != 14 || cap(d) != 14 {
		t.Error("tagged DDP")
	}
}

func TestCheck(t *testing.T) {
	mk := func(op Opcode, last bool, qn, mo uint32, ulpdu int) Header {
		b := make([]byte, 80)
		if op.Tagged() {
			PutTagged(b, op, last, 1, 2, ulpdu)
		} else {
			PutUntagged(b, op, last, 0, qn, 1, mo, ulpdu)
		}
		return Header(b)
	}
	set := func(h Header, i int, v byte) Header { h[i] = v; return h }
	ddpCat := TermDDPCatastrophic()
	badQN := TermDDPUntagged(DDPUntagInvalidQN)
	badMO := TermDDPUntagged(DDPUntagInvalidMO)
	unspec := TermRDMAP(RDMAPRemoteOperation, RDMAPUnspecified)
	unexp := TermRDMAP(RDMAPRemoteOperation, RDMAPUnexpectedOpcode)
	for _, c := range []struct {
		name string
		h    Header
		ext  bool
		want *TermError
	}{
		{"write", mk(OpWrite, false, 0, 0, 14+100), false, nil},
		{"zero-length write", mk(OpWrite, true, 0, 0, 14), false, nil},
		{"read response", mk(OpReadResponse, true, 0, 0, 14+1), false, nil},
		{"send middle segment", mk(OpSend, false, 0, 1424, 18+1424), false, nil},
		{"send inv", mk(OpSendInv, true, 0, 0, 18), false, nil},
		{"read request", mk(OpReadRequest, true, 1, 0, 46), false, nil},
		{"terminate", mk(OpTerminate, true, 2, 0, 22), false, nil},
		{"terminate with attachments", mk(OpTerminate, true, 2, 0, 22+16), false, nil},
		{"immediate, ext", mk(OpImmediate, true, 0, 0, 26), true, nil},
		{"immediate SE, ext", mk(OpImmediateSE, true, 0, 0, 26), true, nil},
		{"atomic request, ext", mk(OpAtomicRequest, true, 1, 0, 70), true, nil},
		{"atomic response, ext", mk(OpAtomicResponse, true, 3, 0, 30), true, nil},
		{"immediate without ext", mk(OpImmediate, true, 0, 0, 26), false, &unexp},
		{"atomic request without ext", mk(OpAtomicRequest, true, 1, 0, 70), false, &unexp},
		{"opcode 0xC even with ext", set(mk(OpSend, true, 0, 0, 18), 3, 0x4C), true, &unexp},
		{"DV 2", set(mk(OpSend, true, 0, 0, 18), 2, 0x42), false, &TermError{Layer: LayerDDP, EType: 2, Code: 6}},
		{"DV 0 tagged", set(mk(OpWrite, true, 0, 0, 14), 2, 0xC0), false, &TermError{Layer: LayerDDP, EType: 1, Code: 4}},
		{"RV 0", set(mk(OpSend, true, 0, 0, 18), 3, 0x03), false, &TermError{Layer: LayerRDMAP, EType: 2, Code: 5}},
		{"T on a send", set(mk(OpSend, true, 0, 0, 18), 2, 0xC1), false, &unexp},
		{"T off on a write", set(mk(OpWrite, true, 0, 0, 14), 2, 0x41), false, &unexp},
		{"send on QN 1", mk(OpSend, true, 1, 0, 18), false, &badQN},
		{"read request on QN 0", mk(OpReadRequest, true, 0, 0, 46), false, &badQN},
		{"terminate on QN 0", mk(OpTerminate, true, 0, 0, 22), false, &badQN},
		{"atomic response on QN 1", mk(OpAtomicResponse, true, 1, 0, 30), true, &badQN},
		{"read request with payload", mk(OpReadRequest, true, 1, 0, 47), false, &unspec},
		{"read request short", mk(OpReadRequest, true, 1, 0, 45), false, &unspec},
		{"read request not last", mk(OpReadRequest, false, 1, 0, 46), false, &unspec},
		{"read request MO 4", mk(OpReadRequest, true, 1, 4, 46), false, &badMO},
		{"terminate short", mk(OpTerminate, true, 2, 0, 21), false, &unspec},
		{"terminate MO", mk(OpTerminate, true, 2, 1, 22), false, &badMO},
		{"immediate long", mk(OpImmediate, true, 0, 0, 27), true, &unspec},
		{"ULPDU shorter than the tagged header", mk(OpWrite, true, 0, 0, 13), false, &ddpCat},
		{"ULPDU shorter than the untagged header", mk(OpSend, true, 0, 0, 17), false, &ddpCat},
		{"slice shorter than the header", mk(OpSend, true, 0, 0, 18)[:19], false, &ddpCat},
		{"3 bytes", Header{0, 18, 0x41}, false, &ddpCat},
		{"nil", nil, false, &ddpCat},
	} {
		got := Check(c.h, c.ext)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestHeaderNoAlloc(t *testing.T) {
	b := make([]byte, ReadRequestLen)
	f := ReadRequestFields{SinkSTag: 1, Size: 2}
	n := testing.AllocsPerRun(100, func() {
		PutTagged(b, OpWrite, true, 1, 2, 14)
		PutUntagged(b, OpSend, true, 0, 0, 1, 0, 18)
		PutReadRequest(b, 1, &f)
		h := Header(b)
		if Check(h, false) != nil || h.ReadRequest().Fields() != f {
			t.Fatal("check")
		}
		if _, err := HeaderLen(b[2], b[3]); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}
