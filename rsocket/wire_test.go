package rsocket

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestConnDataRoundTrip(t *testing.T) {
	d := connData{Version: 1, Flags: flagIOMap, Credits: 384,
		TargetSGL: sge{Addr: 0x1122334455667788, Key: 0xaabbccdd, Length: 2},
		DataBuf:   sge{Addr: 0x8877665544332211, Key: 0x01020304, Length: 65536}}
	b := make([]byte, connDataLen)
	d.encode(b)
	// Network order, as rs_format_conn_data writes it.
	want := []byte{1, flagIOMap, 0x01, 0x80, 0, 0, 0, 0,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 2,
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x01, 0x02, 0x03, 0x04, 0, 1, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", b, want)
	}
	var e connData
	if err := e.decode(b); err != nil || e != d {
		t.Fatalf("decoded %+v, %v", e, err)
	}
	if msgSet(opCtrl, ctrlShutdown) != 0xE0000002 || msgOp(0x80001000) != opSGL || msgData(0x80001000) != 0x1000 {
		t.Fatal("message format")
	}
}

func FuzzConnData(f *testing.F) {
	b := make([]byte, connDataLen)
	(&connData{Version: 1, Credits: 16, TargetSGL: sge{Length: 2}, DataBuf: sge{Length: 4096}}).encode(b)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		var d connData
		if d.decode(p) != nil {
			return
		}
		q := make([]byte, connDataLen)
		d.encode(q)
		var e connData
		if err := e.decode(q); err != nil || e != d {
			t.Fatalf("re-decoded %+v, %v; first %+v", e, err, d)
		}
	})
}

// A target SGL entry is taken whole or not at all: an empty one, or one
// with only its address or only its key and length written yet (the peer's
// RDMA WRITE of it in progress), is not taken.
func TestLoadSGETakesWholeEntries(t *testing.T) {
	buf := make([]byte, 32)
	b := buf[16:32]
	if _, ok := loadSGE(b); ok {
		t.Fatal("an empty entry was taken")
	}
	want := sge{Addr: 0x7f00_1234_5000, Key: 0xabcd, Length: 4096}
	putSGE(b, want, binary.LittleEndian)
	full := bytes.Clone(b)
	clear(b[:8]) // key and length written, address not yet
	if _, ok := loadSGE(b); ok {
		t.Fatal("an entry without its address was taken")
	}
	copy(b, full)
	clear(b[8:]) // address written, key and length not yet
	if _, ok := loadSGE(b); ok {
		t.Fatal("an entry without its length was taken")
	}
	copy(b, full)
	if got, ok := loadSGE(b); !ok || got != want {
		t.Fatalf("loadSGE = %+v, %v; want %+v", got, ok, want)
	}
	clearSGE(b)
	if !bytes.Equal(b, make([]byte, 16)) {
		t.Fatalf("clearSGE left % x", b)
	}
}
