package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, c := extest.Run(t, server, nil, client, [][]string{{"100", "5"}}, false, nil)
	if !strings.Contains(c[0], "CLIENT: Value received: 104\n") || !strings.Contains(s, "SERVER: Value sent: 104\n") {
		t.Fatalf("server:\n%s\nclient:\n%s", s, c[0])
	}
}
