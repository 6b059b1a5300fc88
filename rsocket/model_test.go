package rsocket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
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
	if a.rd.spin.Max() != maxSpin || a.wr.spin.Max() != maxSpin {
		t.Errorf("default spin %v/%v, want %v", a.rd.spin.Max(), a.wr.spin.Max(), maxSpin)
	}
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

// Options' zero value is the defaults; set fields size the connection, on
// the dialing side (Dialer) and the accepting one (ListenConfig); a
// negative or too small size is refused.
func TestOptions(t *testing.T) {
	leakcheck.Check(t)
	lc := ListenConfig{Options: Options{RecvBuffer: 64 << 10, RecvQueue: 32, Spin: -1}}
	ln, err := lc.Listen(fmt.Sprintf("unix:@rsocket-options-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	d := Dialer{Options: Options{SendBuffer: 16 << 10, SendQueue: 64, Spin: 10 * time.Microsecond}}
	nc, err := d.DialContext(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s := <-acc
	if s == nil {
		t.Fatal("Accept failed")
	}
	defer s.Close()
	c, sc := nc.(*Conn), s.(*Conn)
	if c.sbufSize != 16<<10 || c.sq != 64 || c.rbufSize != defaultRBuf || c.rq != defaultRQ {
		t.Errorf("dialer: sbuf %d sq %d rbuf %d rq %d", c.sbufSize, c.sq, c.rbufSize, c.rq)
	}
	if sc.rbufSize != 64<<10 || sc.rq != 32 || sc.sbufSize != defaultSBuf || sc.sq != defaultSQ {
		t.Errorf("accepted: sbuf %d sq %d rbuf %d rq %d", sc.sbufSize, sc.sq, sc.rbufSize, sc.rq)
	}
	if c.rd.spin.Max() != 10*time.Microsecond || sc.rd.spin.Max() != 0 || sc.wr.spin.For() != 0 {
		t.Errorf("spin: dialer %v, accepted %v/%v", c.rd.spin.Max(), sc.rd.spin.Max(), sc.wr.spin.For())
	}
	if _, err := nc.Write([]byte("sized")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "sized" {
		t.Fatalf("read %q, %v", buf, err)
	}
	for _, o := range []Options{{SendBuffer: -1}, {RecvQueue: 4}} {
		bad := Dialer{Options: o}
		if c, err := bad.DialContext(context.Background(), ln.Addr().String()); err == nil {
			c.Close()
			t.Errorf("Dial with %+v succeeded", o)
		}
	}
	if _, err := (&Dialer{Options: Options{SendQueue: -1}}).DialContext(context.Background(), "unix:@x"); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a negative size: %v, want ErrInvalid", err)
	}
}
