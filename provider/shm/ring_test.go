package shm

import (
	"encoding/binary"
	"strings"
	"testing"
)

// TestSetupVersion: a connection message of another protocol version (a
// peer whose rings are laid out differently) is refused, not misread.
func TestSetupVersion(t *testing.T) {
	b := (&setup{typ: msgHello, qpn: 7, l: defaultLayout, pdata: []byte("x")}).marshal()
	var s setup
	if err := s.unmarshal(b); err != nil || s.qpn != 7 || s.l != defaultLayout || string(s.pdata) != "x" {
		t.Fatalf("round trip: %v, %+v", err, s)
	}
	binary.LittleEndian.PutUint16(b[26:], protoVersion-1)
	if err := s.unmarshal(b); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("version %d accepted: %v", protoVersion-1, err)
	}
}
