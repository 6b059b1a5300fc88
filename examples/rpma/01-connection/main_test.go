package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, c := extest.Run(t, server, nil, client, [][]string{nil}, false, nil)
	if !strings.Contains(s, "Received a message: Hello server!") || !strings.Contains(c[0], "Received a message: Hello client!") {
		t.Fatalf("server:\n%s\nclient:\n%s", s, c[0])
	}
}
