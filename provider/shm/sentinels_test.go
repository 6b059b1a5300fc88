package shm_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/rdmacm"
)

// The package's sentinels match themselves and the layer above's
// (rdmacm's disconnect errors, the errno), and print one prefix.
func TestSentinelsTable(t *testing.T) {
	for _, c := range []struct {
		err       error
		is, isNot []error
	}{
		{shm.ErrDisconnected, []error{rdmacm.ErrDisconnected}, []error{rdmacm.ErrLocalDisconnect, syscall.EADDRINUSE}},
		{shm.ErrLocalDisconnect, []error{rdmacm.ErrLocalDisconnect}, []error{rdmacm.ErrDisconnected}},
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
		if n := strings.Count(c.err.Error(), "shm:"); n > 1 {
			t.Errorf("message %q: %d prefixes", c.err, n)
		}
	}
}
