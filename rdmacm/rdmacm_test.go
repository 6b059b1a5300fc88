package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair listens, dials and accepts, with the given private data both ways.
// transport is a connection scheme the tests run over: iWARP on loopback
// TCP, and shm on an abstract Unix socket.
type transport struct {
	name   string
	listen func() string
	dial   func(ln *rdmacm.ID) string
	closed func(t *testing.T) string // an address nobody listens at
	src    string                    // the address a client dials from ("": the route's)
	// fixed: private data arrives padded with zeros to the CM message's
	// fixed size (IB CM: the length is not on the wire).
	fixed bool
}

// pdIs reports whether private data got is want as the transport carries it.
func (tr transport) pdIs(got []byte, want string) bool {
	if tr.fixed {
		return len(got) >= len(want) && string(got[:len(want)]) == want && len(bytes.Trim(got[len(want):], "\x00")) == 0
	}
	return string(got) == want
}

var unixSeq atomic.Int64

var transports = []transport{
	{"tcp", func() string { return "127.0.0.1:0" }, func(ln *rdmacm.ID) string { return ln.LocalAddr().String() },
		func(t *testing.T) string {
			l, _ := net.Listen("tcp", "127.0.0.1:0")
			addr := l.Addr().String()
			l.Close()
			return addr
		}, "", false},
	{"unix", func() string { return fmt.Sprintf("unix:@goverbs-rdmacm-test-%d-%d", os.Getpid(), unixSeq.Add(1)) },
		func(ln *rdmacm.ID) string { return ln.LocalAddr().String() },
		func(t *testing.T) string { return "unix:" + filepath.Join(t.TempDir(), "nobody") }, "", false},
	// RoCE between two loopback addresses of this process's own (each
	// address's UDP port 4791 is one process's).
	{"roce", func() string { return fmt.Sprintf("roce://%v:%d", roceAddr(1), 7000+unixSeq.Add(1)) },
		func(ln *rdmacm.ID) string { return ln.LocalAddr().String() },
		func(t *testing.T) string {
			// The address's device is up (a listener on another port), so
			// a request for a port nobody listens on is rejected.
			ln, err := rdmacm.Listen(fmt.Sprintf("roce://%v:%d", roceAddr(1), 6998))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return fmt.Sprintf("roce://%v:%d", roceAddr(1), 6999)
		},
		roceAddr(2).String(), true},
}

// roceAddr returns 127.x.y.(n+2), x and y from the process ID (the roce
// provider's own tests take .1 and .2).
func roceAddr(n byte) netip.Addr {
	p := os.Getpid()
	return netip.AddrFrom4([4]byte{127, byte(16 + p%200), byte(p / 200 % 250), n + 2})
}

// both runs a test over every transport.
func both(t *testing.T, f func(t *testing.T, tr transport)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr) })
	}
}

func pair(t *testing.T, tr transport, dialPD, acceptPD []byte) (client, server *rdmacm.ID) {
	t.Helper()
	ctx := timeout(t)
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan *rdmacm.ID, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		if err := req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}); err != nil {
			t.Error(err)
		}
		if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: acceptPD, ResponderResources: 1, InitiatorDepth: 1}); err != nil {
			t.Error(err)
		}
		got <- req
	}()
	client, err = rdmacm.DialFrom(ctx, tr.src, tr.dial(ln),
		&verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}},
		&rdmacm.ConnParam{PrivateData: dialPD, ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	server = <-got
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestConnectWithPrivateData(t *testing.T) { both(t, testConnectWithPrivateData) }

func testConnectWithPrivateData(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, []byte("from client"), []byte("from server"))
	if !tr.pdIs(c.PrivateData(), "from server") || !tr.pdIs(s.PrivateData(), "from client") {
		t.Fatalf("private data: client got %q, server got %q", c.PrivateData(), s.PrivateData())
	}
	ird, ord := s.PeerResources()
	if ird != 1 || ord != 1 {
		t.Fatalf("peer resources %d/%d", ird, ord)
	}
	ev, err := c.NextEvent(timeout(t))
	if err != nil || ev.Type != rdmacm.EventEstablished {
		t.Fatalf("client event %v, %v", ev, err)
	}
	ev, err = s.NextEvent(timeout(t))
	if err != nil || ev.Type != rdmacm.EventEstablished {
		t.Fatalf("server event %v, %v", ev, err)
	}
}

// rdma_post_recv(3), rdma_post_sendv(3), rdma_get_recv_comp(3): a receive
// posted before the peer sends gets the message; the context comes back as
// wr_id; GetRecvComp blocks until the receive completes; a gather list goes
// as one message.
func TestPostSendvGetRecvComp(t *testing.T) { both(t, testPostSendvGetRecvComp) }

func testPostSendvGetRecvComp(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	rbuf := make([]byte, 256)
	rmr, err := s.RegMsgs(rbuf)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Dereg()
	if err := s.PostRecv(0xfeed, rbuf[16:144], rmr); err != nil {
		t.Fatal(err)
	}
	type res struct {
		wc  verbs.WC
		err error
	}
	done := make(chan res, 1)
	go func() { wc, err := s.GetRecvComp(timeout(t)); done <- res{wc, err} }()
	select {
	case r := <-done:
		t.Fatalf("GetRecvComp returned before anything was sent: %+v %v", r.wc, r.err)
	case <-time.After(30 * time.Millisecond):
	}
	sbuf := []byte("hello, scatter-gather world")
	smr, err := c.RegMsgs(sbuf)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Dereg()
	sgl := []verbs.SGE{smr.SGE(0, 7), smr.SGE(7, 7), smr.SGE(14, len(sbuf)-14)}
	if err := c.PostSendv(0xbeef, sgl, verbs.SendSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := c.GetSendComp(timeout(t))
	if err != nil || wc.Status != verbs.WCSuccess || wc.WRID != 0xbeef {
		t.Fatalf("send completion %+v %v", wc, err)
	}
	r := <-done
	if r.err != nil || r.wc.Status != verbs.WCSuccess || r.wc.WRID != 0xfeed || int(r.wc.ByteLen) != len(sbuf) {
		t.Fatalf("receive completion %+v %v", r.wc, r.err)
	}
	if !bytes.Equal(rbuf[16:16+len(sbuf)], sbuf) {
		t.Fatalf("received %q", rbuf[16:16+len(sbuf)])
	}
}

// rdma_post_recv(3): the buffer must be registered, and a QP must be associated.
func TestPostRecvRules(t *testing.T) {
	id, err := rdmacm.CreateID("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	buf := make([]byte, 64)
	mr, err := id.RegMsgs(buf)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	if err := id.PostRecv(1, buf, mr); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostRecv without a QP: %v, want ErrInvalidState", err)
	}
	if err := id.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := id.PostRecv(1, make([]byte, 64), mr); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("PostRecv of an unregistered buffer: %v, want ErrInvalid", err)
	}
	if err := id.PostRecv(1, buf, nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("PostRecv with no region: %v, want ErrInvalid", err)
	}
	if err := id.PostRecv(1, buf, mr); err != nil {
		t.Fatalf("PostRecv before connecting (allowed once a QP exists): %v", err)
	}
	// rdma_post_sendv(3): sends only after the identifier is connected.
	if err := id.PostSendv(2, []verbs.SGE{mr.SGE(0, 8)}, verbs.SendSignaled); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostSendv before connecting: %v, want ErrInvalidState", err)
	}
}

// rdma_get_recv_comp(3) is for identifiers with separate send and receive CQs.
func TestGetRecvCompNeedsSeparateCQs(t *testing.T) {
	id, err := rdmacm.CreateID("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	cq, err := id.DeviceContext().CreateCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	if err := id.CreateQP(nil, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	defer id.DestroyQP()
	if _, err := id.GetRecvComp(timeout(t)); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("GetRecvComp on a shared CQ: %v, want ErrInvalid", err)
	}
}

func TestRejectWithPrivateData(t *testing.T) { both(t, testRejectWithPrivateData) }

func testRejectWithPrivateData(t *testing.T, tr transport) {
	leakcheck.Check(t)
	ctx := timeout(t)
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			req.Reject([]byte("go away"))
			req.Close()
		}
	}()
	_, err = rdmacm.DialFrom(ctx, tr.src, tr.dial(ln), nil, &rdmacm.ConnParam{PrivateData: []byte("hello?")})
	var rej *rdmacm.RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, rdmacm.ErrRejected) || !tr.pdIs(rej.PrivateData, "go away") {
		t.Fatalf("Dial: %v, want a rejection carrying %q", err, "go away")
	}
}

func TestConnectRefusedIsRejected(t *testing.T) { both(t, testConnectRefusedIsRejected) }

func testConnectRefusedIsRejected(t *testing.T, tr transport) {
	leakcheck.Check(t)
	id, err := rdmacm.CreateIDFrom(tr.src, tr.closed(t))
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	if err := id.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	err = id.Connect(timeout(t), nil)
	if !errors.Is(err, rdmacm.ErrRejected) {
		t.Fatalf("connect to a closed port: %v, want rejected", err)
	}
	ev, _ := id.NextEvent(timeout(t))
	if ev.Type != rdmacm.EventRejected {
		t.Fatalf("event %v, want REJECTED", ev)
	}
}

func TestUnreachable(t *testing.T) {
	leakcheck.Check(t)
	// A TCP listener that never answers the MPA Request.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(2 * time.Second)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = rdmacm.Dial(ctx, l.Addr().String(), nil, nil)
	if !errors.Is(err, rdmacm.ErrUnreachable) {
		t.Fatalf("Dial to a silent peer: %v, want unreachable", err)
	}
}

// A disconnect reaches the peer as EventDisconnected, and the peer's
// outstanding receives complete with WR_FLUSH_ERR.
func TestDisconnectFlushes(t *testing.T) { both(t, testDisconnectFlushes) }

func testDisconnectFlushes(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	buf := make([]byte, 64)
	mr, _ := s.RegMsgs(buf)
	defer mr.Dereg()
	for i := range 3 {
		if err := s.PostRecv(uint64(i), buf[i*16:i*16+16], mr); err != nil {
			t.Fatal(err)
		}
	}
	// The reason is told alike by every transport: the layers above
	// (rpma) tell a clean end from a lost connection by it.
	drain := func(id *rdmacm.ID, why error) {
		for {
			ev, err := id.NextEvent(timeout(t))
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == rdmacm.EventDisconnected {
				if !errors.Is(ev.Err, why) {
					t.Fatalf("EventDisconnected.Err = %v, want one wrapping %v", ev.Err, why)
				}
				return
			}
		}
	}
	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	drain(s, rdmacm.ErrDisconnected)
	drain(c, rdmacm.ErrLocalDisconnect)
	for i := range 3 {
		wc, err := s.GetRecvComp(timeout(t))
		if err != nil || wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(i) {
			t.Fatalf("receive %d: %+v %v, want WR_FLUSH_ERR", i, wc, err)
		}
	}
	if st := s.QP().State(); st != verbs.QPSErr {
		t.Fatalf("server QP in %v, want ERR", st)
	}
}
