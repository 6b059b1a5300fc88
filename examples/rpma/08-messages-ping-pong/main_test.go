package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, c := extest.Run(t, server, nil, client, [][]string{{"7", "4"}}, false, nil)
	if !strings.Contains(c[0], "Value received: 10\n") || strings.Contains(c[0], "Value received: 11") ||
		!strings.Contains(s, "Value received: 9\n") || !strings.Contains(s, "Value sent: 10\n") {
		t.Fatalf("server:\n%s\nclient:\n%s", s, c[0])
	}
}
