package main

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	s, _ := extest.Run(t, server, nil, client, [][]string{{"3141592"}}, false, nil)
	if !strings.Contains(s, "The value '3141592' was written together with immediate data '3141592'") {
		t.Fatalf("server:\n%s", s)
	}
}
