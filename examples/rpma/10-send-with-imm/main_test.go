package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, _ := extest.Run(t, server, nil, client, [][]string{{"1234", "hello"}}, false, nil)
	if !strings.Contains(s, "Received value 'hello' with immediate data '1234'") {
		t.Fatalf("server:\n%s", s)
	}
	s, _ = extest.Run(t, server, nil, client, [][]string{{"4294967295"}}, false, nil)
	if !strings.Contains(s, "Received value '' with immediate data '4294967295'") {
		t.Fatalf("server:\n%s", s)
	}
}
