package shm_test

import (
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/internal/errtest"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/rdmacm"
)

// The package's sentinels match themselves and the layer above's
// (rdmacm's disconnect errors, the errno), and print one prefix.
func TestSentinelsTable(t *testing.T) {
	errtest.Check(t, "shm:", []errtest.Sentinel{
		{Err: shm.ErrDisconnected, Is: []error{rdmacm.ErrDisconnected}, IsNot: []error{rdmacm.ErrLocalDisconnect, syscall.EADDRINUSE}},
		{Err: shm.ErrLocalDisconnect, Is: []error{rdmacm.ErrLocalDisconnect}, IsNot: []error{rdmacm.ErrDisconnected}},
	})
}
