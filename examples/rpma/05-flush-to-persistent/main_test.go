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
	if !strings.Contains(c[0], "VISIBILITY is used instead") || !strings.Contains(s, "New value: Hello world!") {
		t.Fatalf("server:\n%s\nclient:\n%s", s, c[0])
	}
}

// With a file and direct write declared, the flush is PERSISTENT (native
// between goverbs peers, and by a read after the write without extensions).
func TestExamplePmem(t *testing.T) {
	for _, noExt := range []bool{false, true} {
		dir := t.TempDir()
		sp, cp := []string{filepath.Join(dir, "server"), "on"}, [][]string{{filepath.Join(dir, "client")}}
		adj := func(_ bool, o *common.Opts) { o.NoExt = noExt }
		s, c := extest.Run(t, server, sp, client, cp, false, adj)
		if !strings.Contains(c[0], "PERSISTENT is supported") || !strings.Contains(s, "New value: Hello world!") {
			t.Fatalf("no-ext %v, first run: server:\n%s\nclient:\n%s", noExt, s, c[0])
		}
		s, c = extest.Run(t, server, sp, client, cp, false, adj)
		if !strings.Contains(s, "Old value: Hello world!") || !strings.Contains(s, "New value: ¡Hola Mundo!") {
			t.Fatalf("no-ext %v, second run: server:\n%s\nclient:\n%s", noExt, s, c[0])
		}
	}
}
