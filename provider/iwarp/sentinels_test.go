package iwarp_test

import (
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/errtest"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/rdmacm"
)

// The package's sentinels match themselves and the layer above's
// (rdmacm's disconnect errors), and print iwarp's prefix once.
func TestSentinelsTable(t *testing.T) {
	cases := []errtest.Sentinel{
		{Err: iwarp.ErrDisconnected, Is: []error{rdmacm.ErrDisconnected}, IsNot: []error{rdmacm.ErrLocalDisconnect, iwarp.ErrRemoteTerminate}},
		{Err: iwarp.ErrLocalDisconnect, Is: []error{rdmacm.ErrLocalDisconnect}, IsNot: []error{rdmacm.ErrDisconnected}},
		{Err: iwarp.ErrRemoteTerminate, IsNot: []error{rdmacm.ErrDisconnected, rdmacm.ErrLocalDisconnect}},
	}
	errtest.Check(t, "iwarp:", cases)
	for _, c := range cases {
		if msg := c.Err.Error(); !strings.HasPrefix(msg, "iwarp: ") {
			t.Errorf("message %q: want iwarp's prefix", msg)
		}
	}
}
