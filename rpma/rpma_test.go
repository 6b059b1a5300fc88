package rpma_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

const waitTimeout = 10 * time.Second

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testAddr is the address the tests connect over: loopback iWARP, or
// (tests that set it) shared memory.
var testAddr = "127.0.0.1"

var unixSeq atomic.Int64

// listenPort is the port to listen on: any free one over TCP, a fresh
// socket name over shm (the port is part of the name).
func listenPort() string {
	if strings.HasPrefix(testAddr, "unix:") {
		return strconv.FormatInt(unixSeq.Add(1), 10)
	}
	return "0"
}

func newPeer(t testing.TB) *rpma.Peer {
	t.Helper()
	ctx, err := rpma.DeviceContext(testAddr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := rpma.NewPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Delete(); err != nil {
			t.Errorf("peer delete: %v", err)
		}
	})
	return p
}

func regMR(t testing.TB, p *rpma.Peer, buf []byte, u rpma.Usage) *rpma.MR {
	t.Helper()
	mr, err := p.RegMR(buf, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Dereg() })
	return mr
}

// pair connects a client and a server connection over loopback iWARP. The
// server accepts with spd as private data, the client sends cpd.
type pairOpts struct {
	scfg, ccfg *rpma.ConnCfg
	spd, cpd   []byte
	// beforeAccept runs on the server's request before Connect (pre-post receives).
	beforeAccept func(*rpma.ConnReq)
	// beforeConnect runs on the client's request before Connect.
	beforeConnect func(*rpma.ConnReq)
}

func pair(t testing.TB, sp, cp *rpma.Peer, o pairOpts) (server, client *rpma.Conn) {
	t.Helper()
	ep, err := sp.Listen(testAddr, listenPort())
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Shutdown()
	ctx := tctx(t)
	type res struct {
		c   *rpma.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		req, err := ep.NextConnReq(ctx, o.scfg)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		if o.beforeAccept != nil {
			o.beforeAccept(req)
		}
		c, err := req.Connect(ctx, o.spd)
		ch <- res{c, err}
	}()
	req, err := rpma.NewConnReq(cp, testAddr, ep.Port(), o.ccfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.beforeConnect != nil {
		o.beforeConnect(req)
	}
	client, err = req.Connect(ctx, o.cpd)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		client.Delete()
		t.Fatal(r.err)
	}
	server = r.c
	t.Cleanup(func() {
		client.Disconnect()
		server.Disconnect()
		client.Delete()
		server.Delete()
	})
	expectEvent(t, client, rpma.ConnEstablished)
	expectEvent(t, server, rpma.ConnEstablished)
	return server, client
}

func expectEvent(t testing.TB, c *rpma.Conn, want rpma.ConnEvent) {
	t.Helper()
	ev, err := c.NextEvent(tctx(t))
	if err != nil || ev != want {
		t.Fatalf("event %v (%v), want %v", ev, err, want)
	}
}

// next waits for and returns the next completion of cq.
func next(t testing.TB, cq *rpma.CQ) rpma.Completion {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var c rpma.Completion
		err := cq.GetCompletion(&c)
		if err == nil {
			return c
		}
		if !errors.Is(err, rpma.ErrNoCompletion) {
			t.Fatalf("GetCompletion: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
		time.Sleep(time.Millisecond)
	}
}

func expectEmpty(t testing.TB, cq *rpma.CQ) {
	t.Helper()
	var c rpma.Completion
	if err := cq.GetCompletion(&c); !errors.Is(err, rpma.ErrNoCompletion) {
		t.Fatalf("GetCompletion = %+v, %v; want ErrNoCompletion", c, err)
	}
}

func TestWriteFlushRead(t *testing.T) { testWriteFlushRead(t) }

// Over shared memory (shm0) the same operations work, flushes natively.
func TestWriteFlushReadShm(t *testing.T) {
	testAddr = fmt.Sprintf("unix:@goverbs-rpma-test-%d", os.Getpid())
	defer func() { testAddr = "127.0.0.1" }()
	testWriteFlushRead(t)
}

func testWriteFlushRead(t *testing.T) {
	leakcheck.Check(t)
	for _, ext := range []bool{true, false} {
		name := "native"
		if !ext {
			name = "fallback"
		}
		t.Run(name, func(t *testing.T) {
			sp, cp := newPeer(t), newPeer(t)
			target := regMR(t, sp, make([]byte, 4096), rpma.UsageWriteDst|rpma.UsageReadSrc|rpma.UsageFlushTypePersistent|rpma.UsageFlushTypeVisibility)
			pcfg := rpma.NewPeerCfg()
			pcfg.SetDirectWriteToPmem(true)
			ccfg := rpma.NewConnCfg()
			ccfg.SetExtensions(ext)
			pd := append(target.Descriptor(), pcfg.Descriptor()...)
			_, client := pair(t, sp, cp, pairOpts{spd: pd, ccfg: ccfg})
			got := client.PrivateData()
			remote, err := rpma.RemoteMRFromDescriptor(got[:21])
			if err != nil {
				t.Fatal(err)
			}
			rcfg, err := rpma.PeerCfgFromDescriptor(got[21:22])
			if err != nil {
				t.Fatal(err)
			}
			src := regMR(t, cp, []byte("hello, persistent world"), rpma.UsageWriteSrc)
			if err := client.Flush(remote, 0, 8, rpma.FlushPersistent, rpma.CompletionAlways, 1); !errors.Is(err, rpma.ErrNoSupp) {
				t.Fatalf("persistent flush before the peer cfg: %v, want ErrNoSupp", err)
			}
			if err := client.ApplyRemotePeerCfg(rcfg); err != nil {
				t.Fatal(err)
			}
			if err := client.Write(remote, 100, src, 0, src.Size(), rpma.CompletionOnError, 2); err != nil {
				t.Fatal(err)
			}
			if err := client.Flush(remote, 100, src.Size(), rpma.FlushPersistent, rpma.CompletionAlways, 3); err != nil {
				t.Fatal(err)
			}
			c := next(t, client.CQ())
			if c.OpContext != 3 || c.Op != rpma.OpFlush || c.Status != verbs.WCSuccess {
				t.Fatalf("flush completion %+v", c)
			}
			// Over shm FLUSH is always native (the extensions are iWARP's);
			// over RoCE extensions off mean the fallbacks.
			if want := ext || strings.HasPrefix(testAddr, "unix:"); client.NativeFlush() != want {
				t.Fatalf("native flush %v with extensions %v over %s", client.NativeFlush(), ext, testAddr)
			}
			if !bytes.Equal(target.Bytes()[100:100+src.Size()], src.Bytes()) {
				t.Fatalf("target holds %q", target.Bytes()[100:100+src.Size()])
			}
			dst := regMR(t, cp, make([]byte, 64), rpma.UsageReadDst)
			if err := client.Read(dst, 0, remote, 100, 5, rpma.CompletionAlways, 4); err != nil {
				t.Fatal(err)
			}
			c = next(t, client.CQ())
			if c.OpContext != 4 || c.Op != rpma.OpRead || c.ByteLen != 5 || string(dst.Bytes()[:5]) != "hello" {
				t.Fatalf("read completion %+v, data %q", c, dst.Bytes()[:5])
			}
			var v [8]byte
			copy(v[:], "ATOMIC!!")
			if err := client.AtomicWrite(remote, 8, v, rpma.CompletionAlways, 5); err != nil {
				t.Fatal(err)
			}
			if err := client.Flush(remote, 8, 8, rpma.FlushVisibility, rpma.CompletionAlways, 6); err != nil {
				t.Fatal(err)
			}
			if c = next(t, client.CQ()); c.OpContext != 5 || c.Op != rpma.OpWrite {
				t.Fatalf("atomic write completion %+v", c)
			}
			if c = next(t, client.CQ()); c.OpContext != 6 || c.Op != rpma.OpFlush {
				t.Fatalf("flush completion %+v", c)
			}
			if string(target.Bytes()[8:16]) != "ATOMIC!!" {
				t.Fatalf("atomic write: target holds %q", target.Bytes()[8:16])
			}
			expectEmpty(t, client.CQ())
		})
	}
}

// The connection tests over shared memory (shm0): the same layer, another
// provider.
func TestOverShm(t *testing.T) {
	testAddr = fmt.Sprintf("unix:@goverbs-rpma-shm-%d", os.Getpid())
	defer func() { testAddr = "127.0.0.1" }()
	for name, f := range map[string]func(*testing.T){
		"DisconnectEventsAndFd": TestDisconnectEventsAndFd,
		"CompletionChannels":    TestCompletionChannels,
		"SRQ":                   TestSRQ,
		"ReceivesOnRCQ":         TestGetCompletionReceivesOnRCQ,
		"SuccessOnlyWithAlways": TestGetCompletionSuccessOnlyWithCompletionAlways,
		"ErrorsAlways":          TestGetCompletionErrorsAlways,
	} {
		t.Run(name, f)
	}
}

// The connection tests over RoCEv2 (provider roce) on a loopback address
// of this process's own: both peers on its device.
func TestOverRoCE(t *testing.T) {
	p := os.Getpid()
	testAddr = fmt.Sprintf("roce://127.%d.%d.9", 16+p%200, p/200%250)
	defer func() { testAddr = "127.0.0.1" }()
	for name, f := range map[string]func(*testing.T){
		"WriteFlushRead":        testWriteFlushRead,
		"DisconnectEventsAndFd": TestDisconnectEventsAndFd,
		"CompletionChannels":    TestCompletionChannels,
		"SRQ":                   TestSRQ,
		"ReceivesOnRCQ":         TestGetCompletionReceivesOnRCQ,
		"SuccessOnlyWithAlways": TestGetCompletionSuccessOnlyWithCompletionAlways,
		"ErrorsAlways":          TestGetCompletionErrorsAlways,
	} {
		t.Run(name, f)
	}
}
