package rsocket

import (
	"errors"
	"net"
	"testing"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
)

// The addresses are of the types LocalAddr's doc names: an *rdmacm.Addr
// over shared memory, whose String is dialable, and a *net.TCPAddr over
// iWARP.
func TestAddrTypes(t *testing.T) {
	leakcheck.Check(t)
	for _, c := range []struct {
		tr   string
		want func(a net.Addr) bool
	}{
		{"unix", func(a net.Addr) bool { ra, ok := a.(*rdmacm.Addr); return ok && ra.Scheme == "unix" }},
		{"127.0.0.1:0", func(a net.Addr) bool { _, ok := a.(*net.TCPAddr); return ok }},
	} {
		a, b := pair(t, c.tr)
		if !c.want(a.LocalAddr()) || !c.want(b.RemoteAddr()) {
			t.Errorf("%s: LocalAddr %T, RemoteAddr %T", c.tr, a.LocalAddr(), b.RemoteAddr())
		}
		a.Close()
		b.Close()
	}
}

// A closed connection's calls return net.ErrClosed; a second Close is nil.
func TestClosedConn(t *testing.T) {
	leakcheck.Check(t)
	a, b := pair(t, "unix")
	defer b.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
}
