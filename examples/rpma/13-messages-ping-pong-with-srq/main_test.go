package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, c := extest.Run(t, server, []string{"10000", "3"}, client, [][]string{{"10", "3"}, {"20", "3"}, {"30", "3"}}, true, nil)
	for i, want := range []string{"received: 13\n", "received: 23\n", "received: 33\n"} {
		if !strings.Contains(c[i], "[client] value "+want) {
			t.Fatalf("client %d:\n%s\nserver:\n%s", i, c[i], s)
		}
	}
	if !strings.Contains(s, "Server ended listening.") {
		t.Fatalf("server:\n%s", s)
	}
}
