package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, c := extest.Run(t, server, nil, client, [][]string{nil}, false, nil)
	if !strings.Contains(s, "op_context: 0xF01D}") || !strings.Contains(s, "New value: Hello world!") ||
		!strings.Contains(c[0], "Translation: ¡Hola Mundo!") {
		t.Fatalf("server:\n%s\nclient:\n%s", s, c[0])
	}
}

func TestExamplePmem(t *testing.T) {
	dir := t.TempDir()
	sp, cp := []string{filepath.Join(dir, "server")}, [][]string{{filepath.Join(dir, "client")}}
	extest.Run(t, server, sp, client, cp, false, nil)
	s, _ := extest.Run(t, server, sp, client, cp, false, nil)
	if !strings.Contains(s, "Old value: Hello world!") || !strings.Contains(s, "New value: ¡Hola Mundo!") {
		t.Fatalf("second run: server:\n%s", s)
	}
}

func TestGPSPMMessages(t *testing.T) {
	r := common.FlushRequest{Offset: 17, Length: 1024, OpContext: 0xF01D}
	b := r.Encode()
	// fixed64 fields 1, 2, 3: tags 0x09, 0x11, 0x19, each then 8 little-endian bytes.
	if len(b) != 27 || b[0] != 0x09 || b[9] != 0x11 || b[18] != 0x19 || b[1] != 17 {
		t.Fatalf("request % x", b)
	}
	if got, err := common.DecodeFlushRequest(b); err != nil || got != r {
		t.Fatalf("decode: %+v %v", got, err)
	}
	if _, err := common.DecodeFlushRequest(b[:18]); err == nil {
		t.Fatal("a request without op_context decoded")
	}
	if v, err := common.DecodeFlushResponse(common.EncodeFlushResponse(7)); err != nil || v != 7 {
		t.Fatalf("response: %d %v", v, err)
	}
}
