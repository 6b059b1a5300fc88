package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func writeHeader(t *testing.T) Header {
	t.Helper()
	h := make([]byte, TaggedHeaderLen)
	PutTagged(h, OpWrite, true, 0x00ABCD00, 0x00007F0011223344, TaggedDDPLen+64)
	return h
}

// docs/iwarp-wire.md section 10: a DDP/tagged "invalid STag" Terminate with
// the tagged header attached, 44 bytes, RFC control word 11 00 C0 00,
// QN 2, MSN 1.
func TestTerminateDDPTaggedBytes(t *testing.T) {
	tm := TerminateFor(1, TermDDPTagged(DDPTagInvalidSTag), writeHeader(t))
	b, err := AppendTerminate(nil, &tm)
	if err != nil {
		t.Fatal(err)
	}
	fpdu := FinishFPDU(b, 0, false)
	want := unhex(t, `00 26 | 41 47 | 00000000 | 00000002 | 00000001 | 00000000 | 11 00 C0 00 |
		004E C1 40 00ABCD00 00007F0011223344 | 00000000`)
	if !bytes.Equal(fpdu, want) || len(fpdu) != 44 {
		t.Fatalf("\n% X\n% X", fpdu, want)
	}
	if Check(Header(fpdu), false) != nil {
		t.Fatal(Check(Header(fpdu), false))
	}
	ti, err := ParseTerminate(Header(fpdu))
	if err != nil {
		t.Fatal(err)
	}
	if ti.QN != 2 || ti.MSN != 1 || ti.MO != 0 {
		t.Fatalf("%+v", ti)
	}
	if ti.RFC != (TermFields{Cause: TermDDPTagged(DDPTagInvalidSTag), M: true, D: true}) {
		t.Errorf("RFC reading %+v", ti.RFC)
	}
	// Layer 1 / EType 1 reads the same either way; the flags do not.
	if ti.Swapped != (TermFields{Cause: TermDDPTagged(DDPTagInvalidSTag)}) {
		t.Errorf("swapped reading %+v", ti.Swapped)
	}
	if ti.SegLen != 0x4E || !bytes.Equal(ti.DDPHdr, writeHeader(t)[2:]) || ti.RDMAPHdr != nil {
		t.Errorf("attachments %d % X % X", ti.SegLen, ti.DDPHdr, ti.RDMAPHdr)
	}
}

// The bytes docs/iwarp-wire.md section 10 expects siw to emit on x86 for
// the same Terminate: 11 00 03 00.
func TestTerminateParseSiwX86(t *testing.T) {
	tm := TerminateFor(1, TermDDPTagged(DDPTagInvalidSTag), writeHeader(t))
	b, _ := AppendTerminate(nil, &tm)
	b[22] = 0x03
	ti, err := ParseTerminate(Header(b))
	if err != nil {
		t.Fatal(err)
	}
	if ti.Swapped != (TermFields{Cause: TermDDPTagged(DDPTagInvalidSTag), M: true, D: true}) {
		t.Errorf("swapped %+v", ti.Swapped)
	}
	if ti.RFC.M || ti.RFC.D || ti.RFC.R || ti.DDPHdr == nil {
		t.Errorf("RFC %+v, DDP % X", ti.RFC, ti.DDPHdr)
	}
	// RDMAP/remote operation/unexpected opcode from siw on x86: 20 06 03 00.
	// Read in RFC order it would claim LLP/MPA/insufficient IRD.
	b[20], b[21] = 0x20, 0x06
	ti, _ = ParseTerminate(Header(b))
	if ti.Swapped.Cause != TermRDMAP(RDMAPRemoteOperation, RDMAPUnexpectedOpcode) {
		t.Errorf("swapped %v", ti.Swapped.Cause)
	}
	if ti.RFC.Cause != TermMPA(MPAInsufficientIRD) {
		t.Errorf("RFC %v", ti.RFC.Cause)
	}
}

func TestTerminateReadRequestAttachments(t *testing.T) {
	rr := make([]byte, ReadRequestLen)
	f := ReadRequestFields{SinkSTag: 0x100, SinkTO: 0x200, Size: 0x300, SrcSTag: 0x400, SrcTO: 0x500}
	PutReadRequest(rr, 3, &f)
	tm := TerminateFor(1, TermRDMAP(RDMAPRemoteProtection, RDMAPInvalidSTag), Header(rr))
	b, err := AppendTerminate(nil, &tm)
	if err != nil {
		t.Fatal(err)
	}
	// 22 + 2 + 18 + 28: siw's "adds 48 with M/D/R".
	if h := Header(b); h.ULPDULen() != 70 || len(b) != 72 {
		t.Fatalf("ULPDU %d len %d", h.ULPDULen(), len(b))
	}
	if !bytes.Equal(b[20:26], unhex(t, "01 00 E0 00 002E")) {
		t.Fatalf("control % X", b[20:26])
	}
	ti, _ := ParseTerminate(Header(FinishFPDU(b, 0, true)))
	if !ti.RFC.M || !ti.RFC.D || !ti.RFC.R || len(ti.DDPHdr) != 18 || ReadRequest(ti.RDMAPHdr).Fields() != f {
		t.Fatalf("%+v", ti)
	}
	if Header(append([]byte{0, 46}, ti.DDPHdr...)).MSN() != 3 {
		t.Fatal("attached MSN")
	}
	// RDMAP error on a Send: DDP header only, M and D.
	send := make([]byte, UntaggedHeaderLen)
	PutUntagged(send, OpSendInv, true, 0x1200, 0, 5, 0, 18+10)
	tm = TerminateFor(1, TermRDMAP(RDMAPRemoteOperation, RDMAPSTagNotInvalidated), Header(send))
	if !tm.SegLenValid || tm.SegLen != 28 || len(tm.DDPHdr) != 18 || tm.RDMAPHdr != nil {
		t.Fatalf("%+v", tm)
	}
	// Catastrophic, LLP and header-less causes attach nothing.
	for _, c := range []struct {
		cause TermError
		off   Header
	}{
		{TermRDMAP(RDMAPLocalCatastrophic, RDMAPUnspecified), Header(send)},
		{TermDDPCatastrophic(), Header(send)},
		{TermMPA(MPACRCError), Header(send)},
		{TermDDPUntagged(DDPUntagNoBuffer), nil},
		{TermDDPUntagged(DDPUntagNoBuffer), Header(send[:10])},
	} {
		tm := TerminateFor(1, c.cause, c.off)
		b, err := AppendTerminate(nil, &tm)
		if err != nil || len(b) != 24 || Header(b).ULPDULen() != 22 || b[22] != 0 {
			t.Errorf("%v: % X %v", c.cause, b, err)
		}
	}
}

func TestAppendTerminateErrors(t *testing.T) {
	for _, tm := range []Terminate{
		{DDPHdr: make([]byte, 10)},
		{RDMAPHdr: make([]byte, 53)},
		{Cause: TermError{Layer: 16}},
		{Cause: TermError{EType: 16}},
	} {
		if b, err := AppendTerminate([]byte{1}, &tm); !errors.Is(err, ErrTerminate) || len(b) != 1 {
			t.Errorf("%+v: %v", tm, err)
		}
	}
	// R without D: the RDMAP header follows the control word.
	tm := Terminate{MSN: 1, Cause: TermRDMAP(RDMAPRemoteProtection, RDMAPBaseBounds), RDMAPHdr: make([]byte, 28)}
	b, err := AppendTerminate(nil, &tm)
	if err != nil || len(b) != 24+28 || b[22] != TermFlagR {
		t.Fatalf("% X %v", b, err)
	}
	ti, _ := ParseTerminate(Header(b))
	if ti.DDPHdr != nil || len(ti.RDMAPHdr) != 28 {
		t.Fatalf("%+v", ti)
	}
}

func TestParseTerminateLenient(t *testing.T) {
	if _, err := ParseTerminate(make(Header, 23)); !errors.Is(err, ErrTerminate) {
		t.Fatal(err)
	}
	// ULPDU_Length bounds the attachments; a trailer is ignored.
	tm := TerminateFor(1, TermDDPTagged(DDPTagBaseBounds), writeHeader(t))
	b, _ := AppendTerminate(nil, &tm)
	b = FinishFPDU(b, 0, true)
	ti, _ := ParseTerminate(Header(b))
	if len(ti.DDPHdr) != 14 || ti.RDMAPHdr != nil {
		t.Fatalf("%+v", ti)
	}
	// A ULPDU_Length claiming less than is there: only the control word.
	b[1] = 22
	ti, _ = ParseTerminate(Header(b))
	if ti.DDPHdr != nil || ti.RDMAPHdr != nil {
		t.Fatalf("%+v", ti)
	}
	// Truncated attachment: nothing found.
	tm = TerminateFor(1, TermDDPTagged(DDPTagBaseBounds), writeHeader(t))
	b, _ = AppendTerminate(nil, &tm)
	ti, _ = ParseTerminate(Header(b[:len(b)-1]))
	if ti.DDPHdr != nil {
		t.Fatalf("%+v", ti)
	}
}

func TestTermStrings(t *testing.T) {
	for _, c := range []struct {
		e    TermError
		want string
	}{
		{TermDDPTagged(DDPTagInvalidSTag), "DDP/tagged buffer/invalid STag"},
		{TermDDPUntagged(DDPUntagNoBuffer), "DDP/untagged buffer/invalid MSN - no buffer available"},
		{TermDDPCatastrophic(), "DDP/local catastrophic/0x0"},
		{TermRDMAP(RDMAPRemoteOperation, RDMAPUnexpectedOpcode), "RDMAP/remote operation/unexpected opcode"},
		{TermRDMAP(RDMAPLocalCatastrophic, RDMAPUnspecified), "RDMAP/local catastrophic/unspecified error"},
		{TermMPA(MPACRCError), "LLP/MPA/MPA CRC error"},
		{TermError{Layer: 9, EType: 3, Code: 0x42}, "Layer(9)/3/0x42"},
		{TermError{Layer: LayerLLP, EType: 1, Code: 1}, "LLP/LLPEType(1)/0x1"},
	} {
		if got := c.e.String(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
	e := TermMPA(MPAInsufficientIRD)
	if (&e).Error() != "iwarp terminate: LLP/MPA/insufficient IRD resources" {
		t.Error((&e).Error())
	}
	// Every defined code has a name.
	for c := RDMAPCode(0); c <= 9; c++ {
		if c.String()[0] == 'R' {
			t.Errorf("RDMAPCode %d", c)
		}
	}
	for c := DDPTaggedCode(0); c <= 4; c++ {
		if c.String()[0] == 'D' && c != DDPTagBadVersion {
			t.Errorf("DDPTaggedCode %d", c)
		}
	}
	for c := DDPUntaggedCode(1); c <= 6; c++ {
		if strings.HasPrefix(c.String(), "DDPUntaggedCode") {
			t.Errorf("DDPUntaggedCode %d", c)
		}
	}
	for c := MPACode(1); c <= 7; c++ {
		if c.String()[0] == 'M' && c != MPACRCError && c != MPAMarkerMismatch {
			t.Errorf("MPACode %d: %s", c, c)
		}
	}
	if RDMAPCode(0x10).String() != "RDMAPCode(0x10)" || DDPEType(7).String() != "DDPEType(7)" ||
		RDMAPEType(3).String() != "RDMAPEType(3)" || MPACode(9).String() != "MPACode(0x9)" {
		t.Error("unknown values")
	}
}

func TestTerminateNoAlloc(t *testing.T) {
	off := writeHeader(t)
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() {
		tm := TerminateFor(1, TermDDPTagged(DDPTagInvalidSTag), off)
		var err error
		buf, err = AppendTerminate(buf[:0], &tm)
		if err != nil {
			t.Fatal(err)
		}
		buf = FinishFPDU(buf, 0, true)
		if _, err := ParseTerminate(Header(buf)); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}
