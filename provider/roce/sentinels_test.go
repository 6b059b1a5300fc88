package roce_test

import (
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/internal/errtest"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/rdmacm"
)

// The package's sentinels match themselves and the layer above's
// (rdmacm's disconnect errors, the errno), and print one prefix.
func TestSentinelsTable(t *testing.T) {
	errtest.Check(t, "roce:", []errtest.Sentinel{
		{Err: roce.ErrDisconnected, Is: []error{rdmacm.ErrDisconnected}, IsNot: []error{rdmacm.ErrLocalDisconnect, syscall.EADDRINUSE}},
		{Err: roce.ErrLocalDisconnect, Is: []error{rdmacm.ErrLocalDisconnect}, IsNot: []error{rdmacm.ErrDisconnected}},
		{Err: roce.ErrPortInUse, Is: []error{syscall.EADDRINUSE}, IsNot: []error{rdmacm.ErrDisconnected}},
	})
}
