package rpma_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

// The descriptors are librpma's byte for byte.
func TestDescriptorsLayout(t *testing.T) {
	p := newPeer(t)
	buf := make([]byte, 300)
	mr := regMR(t, p, buf, rpma.UsageWriteDst|rpma.UsageFlushTypePersistent)
	d := mr.Descriptor()
	if len(d) != 21 || binary.LittleEndian.Uint64(d) != mr.Verbs().Addr() || binary.LittleEndian.Uint64(d[8:]) != 300 ||
		binary.LittleEndian.Uint32(d[16:]) != mr.Verbs().RKey() || d[20] != 0x28 {
		t.Fatalf("descriptor % x", d)
	}
	r, err := rpma.RemoteMRFromDescriptor(d)
	if err != nil || r.Size() != 300 || r.Usage() != rpma.UsageWriteDst|rpma.UsageFlushTypePersistent || !r.SupportsFlush(rpma.FlushPersistent) || r.SupportsFlush(rpma.FlushVisibility) {
		t.Fatalf("remote %v, %v", r, err)
	}
	for _, bad := range [][]byte{nil, d[:20], append(d[:20:20], 0), append(append([]byte{}, d...), 0)} {
		if _, err := rpma.RemoteMRFromDescriptor(bad); !errors.Is(err, rpma.ErrInval) {
			t.Errorf("descriptor % x: %v", bad, err)
		}
	}
	cfg := rpma.NewPeerCfg()
	if !bytes.Equal(cfg.Descriptor(), []byte{0}) {
		t.Fatal("default peer cfg descriptor")
	}
	cfg.SetDirectWriteToPmem(true)
	if !bytes.Equal(cfg.Descriptor(), []byte{1}) {
		t.Fatal("direct write descriptor")
	}
	if c, err := rpma.PeerCfgFromDescriptor([]byte{1}); err != nil || !c.DirectWriteToPmem() {
		t.Fatal("decode")
	}
	if _, err := rpma.PeerCfgFromDescriptor([]byte{1, 0}); !errors.Is(err, rpma.ErrInval) {
		t.Fatal("2-byte peer cfg descriptor accepted")
	}
}

// Region usages give librpma's access rights.
func TestUsageAccess(t *testing.T) {
	p := newPeer(t)
	cases := []struct {
		u    rpma.Usage
		want verbs.AccessFlags
	}{
		{rpma.UsageReadSrc, verbs.AccessRemoteRead},
		{rpma.UsageReadDst, verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, // iWARP: the Read sink is written remotely
		{rpma.UsageWriteSrc, verbs.AccessLocalWrite},
		{rpma.UsageWriteDst, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
		{rpma.UsageFlushTypeVisibility, verbs.AccessRemoteRead | verbs.AccessFlushGlobal},
		{rpma.UsageFlushTypePersistent, verbs.AccessRemoteRead | verbs.AccessFlushPersistent},
		{rpma.UsageSend, 0},
		{rpma.UsageRecv, verbs.AccessLocalWrite},
	}
	for _, c := range cases {
		mr := regMR(t, p, make([]byte, 8), c.u)
		if got := mr.Verbs().Access(); got != c.want {
			t.Errorf("%v: access %v, want %v", c.u, got, c.want)
		}
	}
	if _, err := p.RegMR(make([]byte, 8), 0); !errors.Is(err, rpma.ErrInval) {
		t.Error("usage 0 accepted")
	}
	if _, err := p.RegMR(nil, rpma.UsageSend); !errors.Is(err, rpma.ErrInval) {
		t.Error("empty buffer accepted")
	}
}

// Bad input gives an error, never a panic.
func TestBadInput(t *testing.T) {
	leakcheck.Check(t)
	if _, err := rpma.NewPeer(nil); !errors.Is(err, rpma.ErrInval) {
		t.Error("NewPeer(nil)")
	}
	if _, err := rpma.DeviceContext(""); !errors.Is(err, rpma.ErrInval) {
		t.Error("DeviceContext(\"\")")
	}
	var nilPeer *rpma.Peer
	if _, err := nilPeer.RegMR(make([]byte, 8), rpma.UsageSend); !errors.Is(err, rpma.ErrInval) {
		t.Error("nil peer RegMR")
	}
	if _, err := nilPeer.Listen("127.0.0.1", "0"); !errors.Is(err, rpma.ErrInval) {
		t.Error("nil peer Listen")
	}
	p := newPeer(t)
	for _, port := range []string{"", "x", "70000"} {
		if _, err := rpma.NewConnReq(p, "127.0.0.1", port, nil); !errors.Is(err, rpma.ErrInval) {
			t.Errorf("port %q: %v", port, err)
		}
		if _, err := p.Listen("127.0.0.1", port); !errors.Is(err, rpma.ErrInval) {
			t.Errorf("listen port %q: %v", port, err)
		}
	}
	cfg := rpma.NewConnCfg()
	for _, f := range []func() error{
		func() error { return cfg.SetCQSize(-1) },
		func() error { return cfg.SetRQSize(-1) },
		func() error { return cfg.SetSQSize(1 << 20) },
		func() error { return cfg.SetRCQSize(-5) },
		func() error { return cfg.SetTimeout(-time.Second) },
		func() error { return rpma.NewSRQCfg().SetRQSize(-1) },
	} {
		if err := f(); !errors.Is(err, rpma.ErrInval) {
			t.Errorf("bad configuration accepted: %v", err)
		}
	}
	target := regMR(t, p, make([]byte, 64), rpma.UsageWriteDst|rpma.UsageReadSrc|rpma.UsageFlushTypeVisibility)
	_, client := pair(t, p, newPeer(t), pairOpts{})
	remote := remoteOf(t, target)
	local := regMR(t, p, make([]byte, 64), rpma.UsageWriteSrc|rpma.UsageReadDst)
	checks := map[string]error{
		"read past the remote end":  client.Read(local, 0, remote, 60, 8, rpma.CompletionAlways, 0),
		"read past the local end":   client.Read(local, 60, remote, 0, 8, rpma.CompletionAlways, 0),
		"negative offset":           client.Write(remote, -1, local, 0, 8, rpma.CompletionAlways, 0),
		"nil region":                client.Write(nil, 0, local, 0, 8, rpma.CompletionAlways, 0),
		"misaligned atomic write":   client.AtomicWrite(remote, 4, [8]byte{}, rpma.CompletionAlways, 0),
		"atomic write past the end": client.AtomicWrite(remote, 64, [8]byte{}, rpma.CompletionAlways, 0),
		"flush type":                client.Flush(remote, 0, 8, 7, rpma.CompletionAlways, 0),
		"flush past the end":        client.Flush(remote, 0, 65, rpma.FlushVisibility, rpma.CompletionAlways, 0),
		"recv past the end":         client.Recv(local, 60, 8, 0),
	}
	for what, err := range checks {
		if !errors.Is(err, rpma.ErrInval) {
			t.Errorf("%s: %v, want ErrInval", what, err)
		}
	}
	noFlush := regMR(t, p, make([]byte, 64), rpma.UsageWriteDst)
	if err := client.Flush(remoteOf(t, noFlush), 0, 8, rpma.FlushVisibility, rpma.CompletionAlways, 0); !errors.Is(err, rpma.ErrNoSupp) {
		t.Errorf("flush of a region without flush usage: %v", err)
	}
	var nilConn *rpma.Conn
	if _, err := nilConn.NextEvent(context.Background()); !errors.Is(err, rpma.ErrInval) {
		t.Error("nil conn NextEvent")
	}
	if err := nilConn.Write(remote, 0, local, 0, 1, rpma.CompletionAlways, 0); !errors.Is(err, rpma.ErrInval) {
		t.Error("nil conn Write")
	}
}

// The passive side deleting a request rejects it: the client sees
// REJECTED; nobody listening: UNREACHABLE.
func TestRejectedAndUnreachable(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	ep, err := sp.Listen("127.0.0.1", "0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t)
	done := make(chan error, 1)
	go func() {
		req, err := ep.NextConnReq(ctx, nil)
		if err == nil {
			if string(req.PrivateData()) != "knock" {
				err = errors.New("private data " + string(req.PrivateData()))
			}
			if derr := req.Delete(); err == nil {
				err = derr
			}
		}
		done <- err
	}()
	req, err := rpma.NewConnReq(cp, "127.0.0.1", ep.Port(), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := req.Connect(ctx, []byte("knock"))
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, conn, rpma.ConnRejected)
	var rej *rdmacm.RejectedError
	if err := conn.ConnectError(); !errors.As(err, &rej) || errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("ConnectError of a rejection by the server: %v, want a *rdmacm.RejectedError, not ECONNREFUSED", err)
	}
	conn.Delete()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	port := ep.Port()
	if err := ep.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := ep.NextConnReq(ctx, nil); !errors.Is(err, rpma.ErrInval) {
		t.Fatalf("NextConnReq after Shutdown: %v", err)
	}
	cfg := rpma.NewConnCfg()
	cfg.SetTimeout(2 * time.Second)
	req, err = rpma.NewConnReq(cp, "127.0.0.1", port, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err = req.Connect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := conn.NextEvent(ctx)
	if err != nil || (ev != rpma.ConnUnreachable && ev != rpma.ConnRejected) {
		t.Fatalf("connecting to a closed port: %v %v", ev, err)
	}
	if err := conn.ConnectError(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("ConnectError of a closed port: %v, want ECONNREFUSED", err)
	}
	conn.Delete()
}

// A server that takes the TCP connection but never answers the connection
// request is UNREACHABLE once the configured timeout passes.
func TestUnreachable(t *testing.T) {
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // silent until the test ends
		}
	}()
	cp := newPeer(t)
	cfg := rpma.NewConnCfg()
	cfg.SetTimeout(200 * time.Millisecond)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	req, err := rpma.NewConnReq(cp, "127.0.0.1", port, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := req.Connect(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Delete()
	expectEvent(t, conn, rpma.ConnUnreachable)
}

// One side disconnecting gives CLOSED on both; the event fd is readable
// while an event is pending.
func TestDisconnectEventsAndFd(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	server, client := pair(t, sp, cp, pairOpts{})
	if err := client.Disconnect(); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, server.EventFd())
	expectEvent(t, server, rpma.ConnClosed)
	expectEvent(t, client, rpma.ConnClosed)
	if readable(server.EventFd()) {
		t.Fatal("event fd readable with no event pending")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := server.NextEvent(ctx); !errors.Is(err, rpma.ErrNoEvent) {
		t.Fatalf("NextEvent with none: %v", err)
	}
}

func readable(fd int) bool {
	fds := []syscall.FdSet{{}}
	fds[0].Bits[fd/64] |= 1 << (uint(fd) % 64)
	tv := syscall.Timeval{}
	n, err := syscall.Select(fd+1, &fds[0], nil, nil, &tv)
	return err == nil && n > 0
}

func waitReadable(t *testing.T, fd int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !readable(fd) {
		if time.Now().After(deadline) {
			t.Fatal("fd never readable")
		}
		time.Sleep(time.Millisecond)
	}
}

// A shared completion channel: Conn.Wait reports which CQ has completions;
// CQ.Wait and CQ.Fd refuse with ErrSharedChannel. Without one, Conn.Wait
// refuses with ErrNotSharedChannel and the CQ's fd becomes readable.
func TestCompletionChannels(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	ccfg := rpma.NewConnCfg()
	ccfg.SetCompChannel(true)
	ccfg.SetRCQSize(4)
	rbuf := regMR(t, cp, make([]byte, 64), rpma.UsageRecv|rpma.UsageSend)
	server, client := pair(t, sp, cp, pairOpts{ccfg: ccfg, beforeConnect: func(r *rpma.ConnReq) {
		if err := r.Recv(rbuf, 0, 8, 5); err != nil {
			t.Error(err)
		}
	}})
	if err := client.CQ().Wait(context.Background()); !errors.Is(err, rpma.ErrSharedChannel) {
		t.Fatalf("CQ.Wait on a shared channel: %v", err)
	}
	if _, err := client.RCQ().Fd(); !errors.Is(err, rpma.ErrSharedChannel) {
		t.Fatalf("CQ.Fd on a shared channel: %v", err)
	}
	if _, err := client.CompletionFd(); err != nil {
		t.Fatal(err)
	}
	sbuf := regMR(t, sp, []byte("12345678"), rpma.UsageSend)
	if err := server.Send(sbuf, 0, 8, rpma.CompletionAlways, 9); err != nil {
		t.Fatal(err)
	}
	cq, isRCQ, err := client.Wait(tctx(t))
	if err != nil || !isRCQ || cq != client.RCQ() {
		t.Fatalf("Conn.Wait: %v %v %v", cq, isRCQ, err)
	}
	if c := next(t, cq); c.OpContext != 5 || c.Op != rpma.OpRecv || string(rbuf.Bytes()[:8]) != "12345678" {
		t.Fatalf("receive %+v", c)
	}
	// Server side: its own channels.
	if _, _, err := server.Wait(context.Background()); !errors.Is(err, rpma.ErrNotSharedChannel) {
		t.Fatalf("Conn.Wait without a shared channel: %v", err)
	}
	fd, err := server.CQ().Fd()
	if err != nil {
		t.Fatal(err)
	}
	waitReadable(t, fd)
	if err := server.CQ().Wait(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if c := next(t, server.CQ()); c.OpContext != 9 || c.Op != rpma.OpSend {
		t.Fatalf("send completion %+v", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := server.CQ().Wait(ctx); !errors.Is(err, rpma.ErrNoCompletion) {
		t.Fatalf("Wait with nothing coming: %v", err)
	}
}

// An SRQ with its receive CQ serves two connections.
func TestSRQ(t *testing.T) {
	leakcheck.Check(t)
	sp := newPeer(t)
	srq, err := sp.NewSRQ(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srq.Delete(); err != nil {
			t.Errorf("SRQ delete: %v", err)
		}
	})
	scfg := rpma.NewConnCfg()
	scfg.SetSRQ(srq)
	rbuf := regMR(t, sp, make([]byte, 64), rpma.UsageRecv)
	for i := range 2 {
		if err := srq.Recv(rbuf, 8*i, 8, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var servers []*rpma.Conn
	for i := range 2 {
		cp := newPeer(t)
		server, client := pair(t, sp, cp, pairOpts{scfg: scfg})
		if server.RCQ() != srq.RCQ() {
			t.Fatal("the connection's receive CQ is not the SRQ's")
		}
		if err := server.Recv(rbuf, 0, 8, 0); !errors.Is(err, rpma.ErrInval) {
			t.Fatalf("Conn.Recv with an SRQ: %v", err)
		}
		msg := regMR(t, cp, []byte{byte('a' + i), 0, 0, 0, 0, 0, 0, 0}, rpma.UsageSend)
		if err := client.Send(msg, 0, 8, rpma.CompletionOnError, 0); err != nil {
			t.Fatal(err)
		}
		c := next(t, srq.RCQ())
		if c.Op != rpma.OpRecv || c.OpContext != uint64(i) || rbuf.Bytes()[8*i] != byte('a'+i) {
			t.Fatalf("SRQ receive %d: %+v", i, c)
		}
		servers = append(servers, server)
	}
	var wc [1]verbs.WC
	if _, err := srq.RCQ().GetWC(wc[:]); !errors.Is(err, rpma.ErrNoCompletion) {
		t.Fatalf("extra completion: %+v", wc)
	}
	_ = servers
}

// Log messages pass the thresholds and go to the slog logger.
func TestLogThresholds(t *testing.T) {
	var buf bytes.Buffer
	rpma.SetLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer rpma.SetLogger(nil)
	old, _ := rpma.LogThreshold(rpma.ThresholdPrimary)
	defer rpma.SetLogThreshold(rpma.ThresholdPrimary, old)
	if err := rpma.SetLogThreshold(rpma.ThresholdPrimary, rpma.LogError); err != nil {
		t.Fatal(err)
	}
	rpma.RemoteMRFromDescriptor(nil) // no log: not an error of the provider
	rpma.PollErr(errors.New("x"))    // logged at ERROR
	if !strings.Contains(buf.String(), "rpma_level=ERROR") {
		t.Fatalf("log: %q", buf.String())
	}
	buf.Reset()
	rpma.SetLogThreshold(rpma.ThresholdPrimary, rpma.LogDisabled)
	rpma.PollErr(errors.New("x"))
	if buf.Len() != 0 {
		t.Fatalf("logged while disabled: %q", buf.String())
	}
	if err := rpma.SetLogThreshold(rpma.ThresholdPrimary, 9); !errors.Is(err, rpma.ErrInval) {
		t.Fatal("level 9 accepted")
	}
	if err := rpma.SetLogThreshold(5, rpma.LogInfo); !errors.Is(err, rpma.ErrInval) {
		t.Fatal("threshold 5 accepted")
	}
	if l, _ := rpma.LogThreshold(rpma.ThresholdAux); l != rpma.LogDisabled {
		t.Fatalf("aux threshold %v", l)
	}
}

func TestErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  *rpma.Error
		code int
	}{{rpma.ErrUnknown, -100000}, {rpma.ErrNoSupp, -100001}, {rpma.ErrProvider, -100002}, {rpma.ErrNoMem, -100003},
		{rpma.ErrInval, -100004}, {rpma.ErrNoCompletion, -100005}, {rpma.ErrNoEvent, -100006}, {rpma.ErrAgain, -100007},
		{rpma.ErrSharedChannel, -100008}, {rpma.ErrNotSharedChannel, -100009}} {
		if c.err.Code() != c.code || rpma.Code(c.err) != c.code || rpma.ErrString(c.code) != c.err.Error() {
			t.Errorf("%s: code %d", c.err.Name(), c.err.Code())
		}
	}
	if rpma.Code(nil) != 0 || rpma.Code(errors.New("x")) != -100000 {
		t.Error("Code of nil / a foreign error")
	}
}
