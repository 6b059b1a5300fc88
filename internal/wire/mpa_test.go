package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(strings.ReplaceAll(s, "|", " ")), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The worked example of docs/iwarp-wire.md section 2.3: the rping client's
// Request (Enhanced rev 2, no ULP data, IRD = ORD = 1).
const rpingRequest = "4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65   10 02 00 04   00 01 00 01"

func TestMPAWorkedExampleEncode(t *testing.T) {
	f, err := NewRequest(Local{IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := AppendMPA(nil, &f)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, rpingRequest); !bytes.Equal(got, want) {
		t.Fatalf("AppendMPA = % X\nwant       % X", got, want)
	}
	if f.Len() != 24 || f.PDLen() != 4 {
		t.Fatalf("Len %d PDLen %d", f.Len(), f.PDLen())
	}
}

func TestMPAWorkedExampleDecode(t *testing.T) {
	b := unhex(t, rpingRequest)
	reply, flags, rev, pd, err := ParseMPAHeader(b)
	if err != nil || reply || flags != MPAFlagEnhanced || rev != 2 || pd != 4 {
		t.Fatalf("ParseMPAHeader = %v %#x %d %d %v", reply, flags, rev, pd, err)
	}
	f, err := ParseMPA(b)
	if err != nil {
		t.Fatal(err)
	}
	want := MPAFrame{Enhanced: true, Rev: 2, V2: true, IRD: 1, ORD: 1}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("ParseMPA = %+v, want %+v", f, want)
	}
}

func TestMPAReplyKey(t *testing.T) {
	f := MPAFrame{Reply: true, Rev: 1, Private: []byte("hi")}
	b, err := AppendMPA(nil, &f)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:16]) != "MPA ID Rep Frame" || b[8] != 0x65 || b[9] != 0x70 {
		t.Fatalf("reply key % X", b[:16])
	}
	if !bytes.Equal(b[16:], []byte{0, 1, 0, 2, 'h', 'i'}) {
		t.Fatalf("reply tail % X", b[16:])
	}
	g, err := ParseMPA(b)
	if err != nil || !reflect.DeepEqual(g, f) {
		t.Fatalf("ParseMPA = %+v, %v", g, err)
	}
}

func TestMPAFlagsAndV2Bits(t *testing.T) {
	f := MPAFrame{
		Markers: true, CRC: true, Reject: true, Enhanced: true, Rev: 2,
		V2: true, P2P: true, RTR: RTRSend | RTRWrite | RTRRead, IRD: 0x3FFF, ORD: 0x1234,
		Private: []byte{0xAA},
	}
	b, err := AppendMPA(nil, &f)
	if err != nil {
		t.Fatal(err)
	}
	// flags F0, rev 2, PD_Length 5, IRD word C000|3FFF, ORD word C000|1234.
	want := unhex(t, "F0 02 0005 FFFF D234 AA")
	if !bytes.Equal(b[16:], want) {
		t.Fatalf("got % X want % X", b[16:], want)
	}
	g, err := ParseMPA(b)
	if err != nil || !reflect.DeepEqual(g, f) {
		t.Fatalf("round trip: %+v %v", g, err)
	}
	// Each RTR bit alone.
	for _, c := range []struct {
		rtr      RTR
		ird, ord string
	}{{RTRSend, "4001", "0002"}, {RTRWrite, "0001", "8002"}, {RTRRead, "0001", "4002"}} {
		f := MPAFrame{Enhanced: true, Rev: 2, V2: true, RTR: c.rtr, IRD: 1, ORD: 2}
		b, _ := AppendMPA(nil, &f)
		if got := hex.EncodeToString(b[20:24]); got != strings.ToLower(c.ird+c.ord) {
			t.Errorf("RTR %v: v2 block %s", c.rtr, got)
		}
	}
}

func TestMPAParseErrors(t *testing.T) {
	req := unhex(t, rpingRequest)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), req...)) }
	for _, c := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"short header", req[:19], ErrMPATruncated},
		{"short pdata", req[:23], ErrMPATruncated},
		{"trailing", append(append([]byte(nil), req...), 0), ErrMPATrailing},
		{"bad key", mod(func(b []byte) []byte { b[0] = 'm'; return b }), ErrMPAKey},
		{"rev 3", mod(func(b []byte) []byte { b[17] = 3; return b }), ErrMPARevision},
		{"PD_Length 513", mod(func(b []byte) []byte { b[18], b[19] = 2, 1; return b }), ErrMPAPrivateTooLong},
		{"enhanced PD_Length 3", mod(func(b []byte) []byte { b[19] = 3; return b[:23] }), ErrMPAEnhancedShort},
		{"enhanced PD_Length 0", mod(func(b []byte) []byte { b[19] = 0; return b[:20] }), ErrMPAEnhancedShort},
	} {
		_, err := ParseMPA(c.b)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.err)
		}
	}
}

func TestMPAParseAccepts(t *testing.T) {
	req := unhex(t, rpingRequest)
	// Revision 0 and 1 are accepted (siw echoes them); without rev 2 the
	// Enhanced bit does not split off a v2 block.
	for _, rev := range []byte{0, 1} {
		b := append([]byte(nil), req...)
		b[17] = rev
		f, err := ParseMPA(b)
		if err != nil || f.V2 || !f.Enhanced || !bytes.Equal(f.Private, []byte{0, 1, 0, 1}) {
			t.Errorf("rev %d: %+v %v", rev, f, err)
		}
	}
	// Enhanced rev 2 with PD_Length < 4: the frame still comes back.
	b := append([]byte(nil), req[:22]...)
	b[19] = 2
	f, err := ParseMPA(b)
	if !errors.Is(err, ErrMPAEnhancedShort) || f.Rev != 2 || !f.Enhanced || f.V2 || len(f.Private) != 2 {
		t.Errorf("enhanced short: %+v %v", f, err)
	}
	// siw's own reject Reply: enhanced rev 2, R=1, PD_Length 0.
	rej := unhex(t, "4D50412049442052657020467261 6D65 30 02 0000")
	f, err = ParseMPA(rej)
	if err != nil || !f.Reply || !f.Reject || !f.Enhanced || f.V2 || f.Private != nil {
		t.Errorf("siw reject reply: %+v %v", f, err)
	}
	// Reserved flag bits are kept, and written back.
	b = append([]byte(nil), req...)
	b[16] |= MPAFlagSiwGSO | 0x01
	f, err = ParseMPA(b)
	if err != nil || f.Reserved != 0x09 {
		t.Fatalf("reserved: %+v %v", f, err)
	}
	if out, _ := AppendMPA(nil, &f); !bytes.Equal(out, b) {
		t.Errorf("reserved round trip % X", out)
	}
}

func TestAppendMPAErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		f    MPAFrame
		err  error
	}{
		{"rev 3", MPAFrame{Rev: 3}, ErrMPARevision},
		{"v2 on rev 1", MPAFrame{Rev: 1, Enhanced: true, V2: true}, ErrMPAV2},
		{"v2 without Enhanced", MPAFrame{Rev: 2, V2: true}, ErrMPAV2},
		{"IRD 0x4000", MPAFrame{Rev: 2, Enhanced: true, V2: true, IRD: 0x4000}, ErrIRDORDRange},
		{"513 bytes", MPAFrame{Rev: 1, Private: make([]byte, 513)}, ErrMPAPrivateTooLong},
		{"509+4 bytes", MPAFrame{Rev: 2, Enhanced: true, V2: true, Private: make([]byte, 509)}, ErrMPAPrivateTooLong},
	} {
		dst := []byte{1, 2}
		out, err := AppendMPA(dst, &c.f)
		if !errors.Is(err, c.err) || len(out) != 2 {
			t.Errorf("%s: err %v len %d", c.name, err, len(out))
		}
	}
	f := MPAFrame{Rev: 2, Enhanced: true, V2: true, Private: make([]byte, 508)}
	if b, err := AppendMPA(nil, &f); err != nil || len(b) != 20+512 {
		t.Errorf("512-byte PD: %d %v", len(b), err)
	}
}

func TestMPANoAlloc(t *testing.T) {
	req := unhex(t, rpingRequest)
	f, _ := ParseMPA(req)
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() {
		g, err := ParseMPA(req)
		if err != nil {
			t.Fatal(err)
		}
		buf, _ = AppendMPA(buf[:0], &g)
	})
	if n != 0 {
		t.Errorf("%v allocations per parse+append", n)
	}
	_ = f
}

func TestRTRString(t *testing.T) {
	for r, s := range map[RTR]string{0: "none", RTRWrite: "write", RTRRead | RTRSend: "read|send", 0x80: "?"} {
		if r.String() != s {
			t.Errorf("%d: %q", r, r.String())
		}
	}
}
