package wire

import (
	"bytes"
	"testing"
)

func TestAtomicRequest(t *testing.T) {
	f := AtomicRequestFields{
		Op: AtomicCompareSwap, ReqID: 0x11223344, STag: 0x00ABCD00, TO: 0x00007F0000001000,
		AddSwap: 0x0101010101010101, AddSwapMask: 0xFFFFFFFFFFFFFFFF,
		Compare: 0x0202020202020202, CompareMask: 0x00000000FFFFFFFF,
	}
	b := make([]byte, AtomicRequestLen)
	PutAtomicRequest(b, 9, &f)
	want := unhex(t, `0046 414A 00000000 00000001 00000009 00000000 |
		00000002 11223344 00ABCD00 00007F0000001000
		0101010101010101 FFFFFFFFFFFFFFFF 0202020202020202 00000000FFFFFFFF`)
	if !bytes.Equal(b, want) {
		t.Fatalf("\n% X\n% X", b, want)
	}
	h := Header(b)
	if h.Len() != AtomicRequestLen || h.ULPDULen() != 70 || Check(h, true) != nil {
		t.Fatalf("header: len %d check %v", h.Len(), Check(h, true))
	}
	if got := h.AtomicRequest().Fields(); got != f {
		t.Fatalf("%+v", got)
	}
	b[UntaggedHeaderLen] = 0xFF // reserved bits
	if r := h.AtomicRequest(); r.Reserved() != 0xFF00000 || r.Op() != AtomicCompareSwap {
		t.Fatalf("reserved %#x op %v", r.Reserved(), r.Op())
	}
	if AtomicFetchAdd.String() != "FetchAdd" || AtomicSwap.String() != "Swap" ||
		AtomicCompareSwap.String() != "CompareSwap" || AtomicOp(7).String() != "AtomicOp(7)" {
		t.Error("AtomicOp strings")
	}
}

func TestAtomicResponse(t *testing.T) {
	f := AtomicResponseFields{ReqID: 0x11223344, Orig: 0x8877665544332211}
	b := make([]byte, AtomicResponseLen)
	PutAtomicResponse(b, 2, &f)
	want := unhex(t, "001E 414B 00000000 00000003 00000002 00000000 | 11223344 8877665544332211")
	if !bytes.Equal(b, want) {
		t.Fatalf("\n% X\n% X", b, want)
	}
	h := Header(b)
	if h.Len() != AtomicResponseLen || Check(h, true) != nil || h.AtomicResponse().Fields() != f {
		t.Fatal("round trip")
	}
	if Check(h, false) == nil {
		t.Fatal("accepted without ext")
	}
}

func TestImmediate(t *testing.T) {
	b := make([]byte, ImmediateLen)
	PutImmediate(b, false, 4, Imm32Value(0xCAFEF00D))
	want := unhex(t, "001A 4148 00000000 00000000 00000004 00000000 | CAFEF00D 00000000")
	if !bytes.Equal(b, want) {
		t.Fatalf("\n% X\n% X", b, want)
	}
	h := Header(b)
	if h.Len() != ImmediateLen || Check(h, true) != nil || h.Immediate().Imm32() != 0xCAFEF00D ||
		h.Immediate().Value() != 0xCAFEF00D00000000 {
		t.Fatal("round trip")
	}
	PutImmediate(b, true, 5, 0x0102030405060708)
	if b[3] != 0x49 || h.MSN() != 5 || h.Immediate().Value() != 0x0102030405060708 {
		t.Fatalf("SE: % X", b)
	}
	if Immediate(b[:3]).Value() != 0 {
		t.Fatal("short view")
	}
}

func TestExtNoAlloc(t *testing.T) {
	b := make([]byte, AtomicRequestLen)
	req := AtomicRequestFields{Op: AtomicFetchAdd, AddSwap: 1}
	resp := AtomicResponseFields{Orig: 2}
	n := testing.AllocsPerRun(100, func() {
		PutAtomicRequest(b, 1, &req)
		if Header(b).AtomicRequest().Fields() != req {
			t.Fatal("req")
		}
		PutAtomicResponse(b, 1, &resp)
		if Header(b).AtomicResponse().Fields() != resp {
			t.Fatal("resp")
		}
		PutImmediate(b, false, 1, 3)
		if Header(b).Immediate().Value() != 3 {
			t.Fatal("imm")
		}
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}
