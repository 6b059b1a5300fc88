package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// Every sentinel the package documents, against what errors.Is must see in
// it (and must not).
func TestSentinelsTable(t *testing.T) {
	for _, c := range []struct {
		name      string
		err       error
		is, isNot []error
	}{
		{"ErrClosed", rdmacm.ErrClosed, []error{rdmacm.ErrClosed, verbs.ErrClosed, net.ErrClosed}, []error{verbs.ErrInvalid, rdmacm.ErrRejected}},
		{"ErrRejected", rdmacm.ErrRejected, []error{rdmacm.ErrRejected}, []error{rdmacm.ErrUnreachable, rdmacm.ErrClosed}},
		{"ErrUnreachable", rdmacm.ErrUnreachable, []error{rdmacm.ErrUnreachable}, []error{rdmacm.ErrRejected}},
		{"ErrDisconnected", rdmacm.ErrDisconnected, []error{rdmacm.ErrDisconnected}, []error{rdmacm.ErrLocalDisconnect}},
		{"ErrLocalDisconnect", rdmacm.ErrLocalDisconnect, []error{rdmacm.ErrLocalDisconnect}, []error{rdmacm.ErrDisconnected}},
		{"RejectedError refused", &rdmacm.RejectedError{Err: syscall.ECONNREFUSED}, []error{rdmacm.ErrRejected, syscall.ECONNREFUSED}, []error{syscall.EACCES}},
		{"RejectedError by the peer", &rdmacm.RejectedError{PrivateData: []byte("no")}, []error{rdmacm.ErrRejected}, []error{syscall.ECONNREFUSED}},
		{"AcceptError", &rdmacm.AcceptError{Err: syscall.EMFILE}, []error{syscall.EMFILE}, []error{rdmacm.ErrRejected}},
	} {
		for _, target := range c.is {
			if !errors.Is(c.err, target) {
				t.Errorf("%s: errors.Is(%v, %v) is false", c.name, c.err, target)
			}
		}
		for _, target := range c.isNot {
			if errors.Is(c.err, target) {
				t.Errorf("%s: errors.Is(%v, %v) is true", c.name, c.err, target)
			}
		}
		if msg := c.err.Error(); strings.Count(msg, "rdmacm:") > 1 || strings.Contains(msg, "cm: cm:") {
			t.Errorf("%s: message %q repeats a prefix", c.name, msg)
		}
	}
}

// An address no dial can reach is an invalid argument, at once, for Dial
// and Listen alike (EINVAL too, as rdma_resolve_addr gives), and an
// unknown scheme is not supported.
func TestBadAddressIsInvalid(t *testing.T) {
	for _, addr := range []string{"localhost:99999", "127.0.0.1", "[::1", "127.0.0.1:-1", "roce://127.0.0.1:70000", "tcp://127.0.0.1:x"} {
		_, err := rdmacm.Dial(timeout(t), addr, nil, nil)
		if !errors.Is(err, verbs.ErrInvalid) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Dial(%q): %v, want ErrInvalid (EINVAL)", addr, err)
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "rdmacm: ") || strings.Contains(err.Error(), "verbs:")) {
			t.Errorf("Dial(%q): %q, want rdmacm's prefix alone", addr, err)
		}
		ln, err := rdmacm.Listen(addr)
		if !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("Listen(%q): %v, want ErrInvalid", addr, err)
		}
		if ln != nil {
			ln.Close()
		}
	}
	if _, err := rdmacm.Listen("quic://127.0.0.1:1"); !errors.Is(err, verbs.ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Listen of an unknown scheme: %v, want ErrNotSupported", err)
	}
}

// A second listener at a listener's address is EADDRINUSE, on every
// transport.
func TestAddressInUse(t *testing.T) { both(t, testAddressInUse) }

func testAddressInUse(t *testing.T, tr transport) {
	leakcheck.Check(t)
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln2, err := rdmacm.Listen(ln.LocalAddr().String())
	if ln2 != nil {
		ln2.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen(%q) twice: %v, want EADDRINUSE", ln.LocalAddr(), err)
	}
}

// A rejection is this package's own type, and says so once.
func TestRejectionType(t *testing.T) {
	leakcheck.Check(t)
	tr := transports[0]
	_, err := rdmacm.Dial(timeout(t), tr.closed(t), nil, nil)
	var rej *rdmacm.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("Dial of a closed port: %v (%T), want a *rdmacm.RejectedError", err, err)
	}
	if got := fmt.Sprintf("%T", err); got != "*rdmacm.RejectedError" {
		t.Errorf("%%T of the rejection is %s", got)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "rdmacm: ") || strings.Count(msg, "rdmacm: ") != 1 || strings.Contains(msg, "cm: ") && !strings.HasPrefix(msg, "rdmacm: ") {
		t.Errorf("message %q: want one prefix, rdmacm's", msg)
	}
}

// The zero values mean what a connection needs: a ConnParam with nothing
// but private data allows RDMA READ both ways and waits for a receive a
// SEND finds missing (RNR retry for ever); a QPInitAttr with only a send
// queue depth has a receive queue and one SGE each way.
func TestZeroValuesWork(t *testing.T) { both(t, testZeroValuesWork) }

func testZeroValuesWork(t *testing.T, tr transport) {
	leakcheck.Check(t)
	ctx := timeout(t)
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *rdmacm.ID, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		if err := req.CreateQP(nil, verbs.QPInitAttr{}); err != nil {
			t.Error(err)
		} else if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: []byte("welcome")}); err != nil {
			t.Error(err)
		}
		got <- req
	}()
	c, err := rdmacm.DialFrom(ctx, tr.src, tr.dial(ln), &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 64}},
		&rdmacm.ConnParam{PrivateData: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-got
	if s == nil {
		t.FailNow()
	}
	defer s.Close()

	// The server's memory, read by the client.
	src := make([]byte, 64)
	copy(src, "read me")
	smr, err := s.RegRead(src)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Dereg()
	dst := make([]byte, 64)
	cmr, err := c.RegMsgs(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer cmr.Dereg()
	if err := c.PostRead(1, dst[:7], cmr, verbs.SendSignaled, smr.Addr(), smr.RKey()); err != nil {
		t.Fatal(err)
	}
	if wc, err := c.GetSendComp(ctx); err != nil || wc.Status != verbs.WCSuccess || string(dst[:7]) != "read me" {
		t.Fatalf("RDMA READ with zero ConnParams: %v %v, read %q", wc.Status, err, dst[:7])
	}

	if tr.name == "tcp" {
		return // iWARP has no RNR: a SEND without a receive is the peer's error there
	}
	// A SEND before the receive: the zero RNRRetryCount retries for ever.
	if err := c.PostSend(2, dst[:4], cmr, verbs.SendSignaled); err != nil {
		t.Fatalf("a one-SGE send on a QP whose Cap gave only MaxSendWR: %v", err)
	}
	rbuf := make([]byte, 64)
	rmr, err := s.RegMsgs(rbuf)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Dereg()
	wait, cancel := context.WithTimeout(ctx, 0)
	cancel()
	if wc, err := s.GetRecvComp(wait); err == nil {
		t.Fatalf("a receive completion before any receive was posted: %+v", wc)
	}
	if err := s.PostRecv(3, rbuf, rmr); err != nil {
		t.Fatal(err)
	}
	if wc, err := c.GetSendComp(ctx); err != nil || wc.Status != verbs.WCSuccess {
		t.Fatalf("SEND before the receive, zero RNRRetryCount: %v %v", wc.Status, err)
	}
	if wc, err := s.GetRecvComp(ctx); err != nil || wc.Status != verbs.WCSuccess || string(rbuf[:4]) != "read" {
		t.Fatalf("receive: %v %v %q", wc.Status, err, rbuf[:4])
	}
}

// Addr.String is "" for an unnamed socket (a dialer's end over shared
// memory), as its doc says, and the address to dial otherwise.
func TestUnnamedAddrString(t *testing.T) {
	for _, c := range []struct {
		a    *rdmacm.Addr
		want string
	}{
		{&rdmacm.Addr{Scheme: "unix", Addr: &net.UnixAddr{Name: "", Net: "unixpacket"}}, ""},
		{&rdmacm.Addr{Scheme: "unix", Addr: &net.UnixAddr{Name: "@", Net: "unixpacket"}}, ""},
		{&rdmacm.Addr{Scheme: "unix", Addr: &net.UnixAddr{Name: "@x", Net: "unixpacket"}}, "unix:@x"},
		{&rdmacm.Addr{Scheme: "roce", Addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 7}}, "roce://127.0.0.2:7"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("%#v prints %q, want %q", c.a.Addr, got, c.want)
		}
	}
	leakcheck.Check(t)
	c, s := pair(t, transports[1], nil, nil)
	defer c.Close()
	defer s.Close()
	if got := c.LocalAddr().String(); got != "" {
		t.Errorf("a unix: dialer's LocalAddr prints %q, want \"\" (unnamed)", got)
	}
}

// Zero provider configurations, given through IDOptions on both sides, are
// the providers' defaults: a connection is made and carries a message.
func TestZeroIDOptionsAndConfigs(t *testing.T) { both(t, testZeroIDOptionsAndConfigs) }

func testZeroIDOptionsAndConfigs(t *testing.T, tr transport) {
	leakcheck.Check(t)
	ctx := timeout(t)
	o := rdmacm.IDOptions{TCP: &iwarp.Config{}, Unix: &shm.Config{}, RoCE: &roce.Config{}}
	ln, err := rdmacm.NewID(tr.listen(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ln.Listen(); err != nil {
		t.Fatal(err)
	}
	got := make(chan *rdmacm.ID, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			if err = req.CreateQP(nil, verbs.QPInitAttr{}); err == nil {
				err = req.Accept(ctx, nil)
			}
		}
		if err != nil {
			t.Error(err)
		}
		got <- req
	}()
	o.Source = tr.src
	c, err := rdmacm.NewID(tr.dial(ln), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateQP(nil, verbs.QPInitAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s == nil {
		t.FailNow()
	}
	defer s.Close()
	buf := make([]byte, 16)
	smr, err := s.RegMsgs(buf)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Dereg()
	if err := s.PostRecv(1, buf, smr); err != nil {
		t.Fatal(err)
	}
	if err := c.PostSend(2, []byte("zero"), nil, verbs.SendInline|verbs.SendSignaled); err != nil {
		t.Fatalf("an inline send with rdmacm's default max_inline_data: %v", err)
	}
	if wc, err := s.GetRecvComp(ctx); err != nil || wc.Status != verbs.WCSuccess || string(buf[:4]) != "zero" {
		t.Fatalf("receive: %v %v %q", wc.Status, err, buf[:4])
	}
}

// A listen that fails says rdmacm's prefix once, and the transport's error
// (a *net.OpError over TCP) stays reachable.
func TestListenErrorKeepsCause(t *testing.T) {
	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = rdmacm.Listen(ln.LocalAddr().String())
	var oe *net.OpError
	if !errors.As(err, &oe) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a second TCP listener: %v (%T), want a *net.OpError wrapping EADDRINUSE", err, err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "rdmacm: listen ") || strings.Count(msg, "rdmacm:") != 1 {
		t.Errorf("message %q: want rdmacm's prefix once", msg)
	}
}
