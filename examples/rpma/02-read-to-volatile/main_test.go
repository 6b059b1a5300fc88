package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	_, c := extest.Run(t, server, nil, client, [][]string{nil}, false, nil)
	if !strings.Contains(c[0], "Read a message: Hello client!") {
		t.Fatalf("client:\n%s", c[0])
	}
}
