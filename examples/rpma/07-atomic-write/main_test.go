package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/examples/rpma/internal/extest"
)

func TestExample(t *testing.T) {
	for _, noExt := range []bool{false, true} {
		adj := func(_ bool, o *common.Opts) { o.NoExt = noExt }
		s, _ := extest.Run(t, server, nil, client, [][]string{{"one", "two", "three"}}, false, adj)
		if s != "one\ntwo\nthree\n" {
			t.Fatalf("no-ext %v: log %q", noExt, s)
		}
	}
}

// With a file the log grows from run to run.
func TestExamplePmem(t *testing.T) {
	sp := []string{filepath.Join(t.TempDir(), "log")}
	extest.Run(t, server, sp, client, [][]string{{"alpha"}}, false, nil)
	s, c := extest.Run(t, server, sp, client, [][]string{{"beta"}}, false, nil)
	if s != "alpha\nbeta\n" || !strings.Contains(c[0], "used value: 22") {
		t.Fatalf("log %q, client:\n%s", s, c[0])
	}
}
