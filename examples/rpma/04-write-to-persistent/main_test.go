package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	_, c := extest.Run(t, server, nil, client, [][]string{nil}, false, nil)
	if !strings.Contains(c[0], "Translation: ¡Hola Mundo!") {
		t.Fatalf("client:\n%s", c[0])
	}
}

// With files, each run continues where the previous one left off.
func TestExamplePmem(t *testing.T) {
	dir := t.TempDir()
	sp, cp := []string{filepath.Join(dir, "server")}, [][]string{{filepath.Join(dir, "client")}}
	s, c := extest.Run(t, server, sp, client, cp, false, nil)
	if !strings.Contains(s, "New value: Hello world!") || !strings.Contains(c[0], "Translation: ¡Hola Mundo!") {
		t.Fatalf("first run: server:\n%s\nclient:\n%s", s, c[0])
	}
	s, c = extest.Run(t, server, sp, client, cp, false, nil)
	if !strings.Contains(s, "Old value: Hello world!") || !strings.Contains(s, "New value: ¡Hola Mundo!") ||
		!strings.Contains(c[0], "Next value: ¡Hola Mundo!") {
		t.Fatalf("second run: server:\n%s\nclient:\n%s", s, c[0])
	}
}
