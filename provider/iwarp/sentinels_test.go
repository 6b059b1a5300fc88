package iwarp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/rdmacm"
)

// The package's sentinels match themselves and the layer above's
// (rdmacm's disconnect errors), and print iwarp's prefix once.
func TestSentinelsTable(t *testing.T) {
	for _, c := range []struct {
		err       error
		is, isNot []error
	}{
		{iwarp.ErrDisconnected, []error{rdmacm.ErrDisconnected}, []error{rdmacm.ErrLocalDisconnect, iwarp.ErrRemoteTerminate}},
		{iwarp.ErrLocalDisconnect, []error{rdmacm.ErrLocalDisconnect}, []error{rdmacm.ErrDisconnected}},
		{iwarp.ErrRemoteTerminate, nil, []error{rdmacm.ErrDisconnected, rdmacm.ErrLocalDisconnect}},
	} {
		if !errors.Is(c.err, c.err) {
			t.Errorf("%v does not match itself", c.err)
		}
		for _, target := range c.is {
			if !errors.Is(c.err, target) {
				t.Errorf("errors.Is(%v, %v) is false", c.err, target)
			}
		}
		for _, target := range c.isNot {
			if errors.Is(c.err, target) {
				t.Errorf("errors.Is(%v, %v) is true", c.err, target)
			}
		}
		if msg := c.err.Error(); !strings.HasPrefix(msg, "iwarp: ") || strings.Count(msg, ": ") > 1 && strings.Count(msg, "iwarp:") > 1 {
			t.Errorf("message %q: want iwarp's prefix once", msg)
		}
	}
}
