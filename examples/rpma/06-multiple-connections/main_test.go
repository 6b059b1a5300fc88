package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, _ := extest.Run(t, server, []string{"3"}, client, [][]string{{"0"}, {"1"}, {"2"}}, true, nil)
	for _, n := range []string{"Andy", "Chet", "Derek"} {
		if !strings.Contains(s, "- "+n+"\n") {
			t.Fatalf("server did not meet %s:\n%s", n, s)
		}
	}
}
