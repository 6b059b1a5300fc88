package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestPadAndLengths(t *testing.T) {
	for _, c := range []struct{ ulpdu, pad, fpdu int }{
		{0, 2, 8}, {2, 0, 8}, {14, 0, 20}, {18, 0, 24}, {22, 0, 28}, {46, 0, 52},
		{34, 0, 40}, {78, 0, 84}, {79, 3, 88}, {80, 2, 88}, {81, 1, 88}, {65535, 3, 65544},
	} {
		if got := Pad(c.ulpdu); got != c.pad {
			t.Errorf("Pad(%d) = %d, want %d", c.ulpdu, got, c.pad)
		}
		if got := FPDULen(c.ulpdu); got != c.fpdu {
			t.Errorf("FPDULen(%d) = %d, want %d", c.ulpdu, got, c.fpdu)
		}
		if got := TrailerLen(c.ulpdu); got != c.pad+4 {
			t.Errorf("TrailerLen(%d) = %d", c.ulpdu, got)
		}
		if (2+c.ulpdu+c.pad)%4 != 0 {
			t.Errorf("ulpdu %d: not aligned", c.ulpdu)
		}
	}
	// Every header size plus 2 is a multiple of 4, so only payload pads.
	for _, n := range []int{TaggedHeaderLen, UntaggedHeaderLen, ReadRequestLen, TerminateHeaderLen,
		ImmediateLen, AtomicRequestLen, AtomicResponseLen} {
		if Pad(n-2) != 0 {
			t.Errorf("header %d pads", n)
		}
	}
}

func TestMaxPayload(t *testing.T) {
	// docs/iwarp-wire.md section 0: MSS 1448 gives 1424 per Send FPDU and
	// 1428 per Write or Read Response FPDU.
	if got := MaxPayload(1448, UntaggedHeaderLen); got != 1424 {
		t.Errorf("Send: %d", got)
	}
	if got := MaxPayload(1448, TaggedHeaderLen); got != 1428 {
		t.Errorf("Write: %d", got)
	}
	if got := MaxPayload(1460, TaggedHeaderLen); got != 1456-20 {
		t.Errorf("MSS 1460: %d", got)
	}
	for _, mss := range []int{0, 10, 536, 1448, 9000, 65483, 1 << 20} {
		for _, h := range []int{TaggedHeaderLen, UntaggedHeaderLen} {
			p := MaxPayload(mss, h)
			if p < 0 {
				t.Fatalf("negative")
			}
			ulpdu := h - 2 + p
			if p > 0 && (ulpdu > MaxULPDULen || FPDULen(ulpdu) > max(mss, h+4)) {
				t.Errorf("mss %d hdr %d: payload %d gives FPDU %d", mss, h, p, FPDULen(ulpdu))
			}
			if p > 0 && Pad(ulpdu) != 0 {
				t.Errorf("mss %d hdr %d: middle segment pads", mss, h)
			}
		}
	}
}

func TestCRC32CVectors(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("crc32c(123456789) = %#x", got)
	}
	// RFC 3720 B.4: 32 zero bytes give the bytes aa 36 91 8a on the wire.
	if got := Checksum(make([]byte, 32)); got != 0x8A9136AA {
		t.Fatalf("crc32c(32 zeros) = %#x", got)
	}
	b := AppendTrailer(nil, 0, Checksum(make([]byte, 32)))
	if !bytes.Equal(b, []byte{0xAA, 0x36, 0x91, 0x8A}) {
		t.Fatalf("little-endian placement: % X", b)
	}
	var c CRC
	c.Update([]byte("1234"))
	c.Update(nil)
	c.Update([]byte("56789"))
	if c.Sum() != 0xE3069283 {
		t.Fatalf("incremental %#x", c.Sum())
	}
	c.Reset()
	if c.Sum() != 0 {
		t.Fatal("Reset")
	}
}

func TestCRCIncrementalOverFPDU(t *testing.T) {
	hdr := make([]byte, TaggedHeaderLen)
	payload := []byte("abcdefghijklmnopq") // 17 bytes: pad 3
	PutTagged(hdr, OpWrite, true, 0x1234500, 0x7000, TaggedDDPLen+len(payload))
	pad := Pad(TaggedDDPLen + len(payload))
	if pad != 3 {
		t.Fatalf("pad %d", pad)
	}
	var c CRC
	c.Update(hdr)
	c.Update(payload[:5])
	c.Update(payload[5:])
	c.UpdatePad(pad)
	whole := append(append(append([]byte(nil), hdr...), payload...), 0, 0, 0)
	if c.Sum() != Checksum(whole) {
		t.Fatalf("pieces %#x whole %#x", c.Sum(), Checksum(whole))
	}
	fpdu := AppendTrailer(append(append([]byte(nil), hdr...), payload...), pad, c.Sum())
	if len(fpdu) != FPDULen(TaggedDDPLen+len(payload)) {
		t.Fatalf("len %d", len(fpdu))
	}
	if binary.LittleEndian.Uint32(fpdu[len(fpdu)-4:]) != c.Sum() || TrailerCRC(fpdu) != c.Sum() {
		t.Fatal("CRC not little-endian at the end")
	}
	if !bytes.Equal(fpdu[len(fpdu)-7:len(fpdu)-4], []byte{0, 0, 0}) {
		t.Fatal("pad not zero")
	}
	if !CheckFPDU(fpdu) {
		t.Fatal("CheckFPDU false")
	}
	fpdu[20] ^= 1
	if CheckFPDU(fpdu) {
		t.Fatal("CheckFPDU true after corruption")
	}
	// FinishFPDU builds the same trailer.
	again := FinishFPDU(append([]byte{9, 9}, whole[:len(whole)-3]...), 2, true)
	fpdu[20] ^= 1
	if !bytes.Equal(again[2:], fpdu) {
		t.Fatalf("FinishFPDU\n% X\n% X", again[2:], fpdu)
	}
	// With CRC off the field is zero.
	off := FinishFPDU(whole[:len(whole)-3:len(whole)-3], 0, false)
	if TrailerCRC(off) != 0 || len(off) != len(fpdu) {
		t.Fatal("CRC off")
	}
	tr := make([]byte, 7)
	for i := range tr {
		tr[i] = 0xEE
	}
	if n := PutTrailer(tr, 3, 0x01020304); n != 7 || !bytes.Equal(tr, []byte{0, 0, 0, 4, 3, 2, 1}) {
		t.Fatalf("PutTrailer %d % X", n, tr)
	}
	if CheckFPDU([]byte{0, 0}) || CheckFPDU([]byte{0, 9, 0, 0, 0, 0, 0, 0}) {
		t.Fatal("CheckFPDU accepts a bad length")
	}
	if TrailerCRC([]byte{1, 2}) != 0 {
		t.Fatal("TrailerCRC short")
	}
}

func TestCRCNoAlloc(t *testing.T) {
	b := make([]byte, 1500)
	out := make([]byte, 0, 16)
	n := testing.AllocsPerRun(100, func() {
		var c CRC
		c.Update(b[:700])
		c.Update(b[700:])
		c.UpdatePad(2)
		out = AppendTrailer(out[:0], 2, c.Sum())
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}
