package rpma_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

// A device without native FLUSH and ATOMIC_WRITE, as provider rdmacore's
// devices are (and most NICs with most rdma-core): a loop device so
// configured, reached through a connection manager of this test's own,
// "loopnf://name", since rdmacm has none for loop devices.
var (
	noNativeOnce sync.Once
	noNativeDev  string
)

func noNativeAddr(t testing.TB) string {
	noNativeOnce.Do(func() {
		noNativeDev = loop.AddDeviceConfig("loopnf0", loop.Config{NoFlush: true, NoAtomicWrite: true})
		cm.Register(loopCM{})
	})
	return "loopnf://" + t.Name()
}

// TestNoNativeFlush: a peer whose device lacks native FLUSH registers a
// flush target as librpma does there (for remote read, no flush rights,
// which the device would refuse), and its connections flush by an RDMA
// Read after the writes and write atomically by a fenced RDMA Write, in
// both roles; a device with them (loop0) keeps the flush rights.
func TestNoNativeFlush(t *testing.T) {
	leakcheck.Check(t)
	addr := noNativeAddr(t)
	old := testAddr
	testAddr = addr
	t.Cleanup(func() { testAddr = old })

	sp, cp := newPeer(t), newPeer(t)
	if sp.NativeFlush() || sp.NativeAtomicWrite() {
		t.Fatalf("peer on %s: native flush %v, atomic write %v; the device has neither", noNativeDev, sp.NativeFlush(), sp.NativeAtomicWrite())
	}
	usage := rpma.UsageWriteDst | rpma.UsageFlushTypeVisibility | rpma.UsageFlushTypePersistent
	target := regMR(t, sp, make([]byte, 4096), usage)
	// librpma's rpma_peer_usage2access without native flush.
	if got, want := target.Verbs().Access(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead; got != want {
		t.Fatalf("access of a %v region without native flush: %v, want %v", usage, got, want)
	}
	if r, err := rpma.RemoteMRFromDescriptor(target.Descriptor()); err != nil || r.Usage()&(rpma.UsageFlushTypePersistent|rpma.UsageFlushTypeVisibility) != usage&^rpma.UsageWriteDst {
		t.Fatalf("the descriptor's flush types: %v (%v)", r, err)
	}

	// The same usage on a device with native FLUSH (loop0) keeps both.
	lctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer lctx.Close()
	lp, err := rpma.NewPeer(lctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Delete()
	if !lp.NativeFlush() || !lp.NativeAtomicWrite() {
		t.Fatalf("peer on loop0: native flush %v, atomic write %v", lp.NativeFlush(), lp.NativeAtomicWrite())
	}
	nmr, err := lp.RegMR(make([]byte, 64), usage)
	if err != nil {
		t.Fatal(err)
	}
	want := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
	if got := nmr.Verbs().Access(); got != want {
		t.Fatalf("access with native flush: %v, want %v", got, want)
	}
	nmr.Dereg()

	pcfg := rpma.NewPeerCfg()
	pcfg.SetDirectWriteToPmem(true)
	server, client := pair(t, sp, cp, pairOpts{spd: append(target.Descriptor(), pcfg.Descriptor()...)})
	got := client.PrivateData()
	remote, err := rpma.RemoteMRFromDescriptor(got[:rpma.MRDescriptorSize])
	if err != nil {
		t.Fatal(err)
	}
	rcfg, err := rpma.PeerCfgFromDescriptor(got[rpma.MRDescriptorSize:])
	if err != nil {
		t.Fatal(err)
	}
	if err := client.ApplyRemotePeerCfg(rcfg); err != nil {
		t.Fatal(err)
	}
	src := regMR(t, cp, []byte("written, then flushed by a read"), rpma.UsageWriteSrc)
	for i, typ := range []rpma.FlushType{rpma.FlushPersistent, rpma.FlushVisibility} {
		off := 100 + 64*i
		if err := client.Write(remote, off, src, 0, src.Size(), rpma.CompletionOnError, 1); err != nil {
			t.Fatal(err)
		}
		if err := client.Flush(remote, off, src.Size(), typ, rpma.CompletionAlways, 2); err != nil {
			t.Fatalf("%v flush: %v", typ, err)
		}
		// The verbs completion shows the method: an RDMA Read, as
		// librpma's read-after-write; GetCompletion (below) says OpFlush.
		wc := nextWC(t, client.CQ())
		if wc.WRID != 2 || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead {
			t.Fatalf("%v flush completion %+v, want a successful RDMA_READ", typ, wc)
		}
		if !bytes.Equal(target.Bytes()[off:off+src.Size()], src.Bytes()) {
			t.Fatalf("target holds %q after the %v flush", target.Bytes()[off:off+src.Size()], typ)
		}
	}
	if err := client.Flush(remote, 0, 8, rpma.FlushVisibility, rpma.CompletionAlways, 3); err != nil {
		t.Fatal(err)
	}
	if c := next(t, client.CQ()); c.OpContext != 3 || c.Op != rpma.OpFlush || c.Status != verbs.WCSuccess {
		t.Fatalf("flush completion %+v", c)
	}
	if client.NativeFlush() {
		t.Fatal("NativeFlush after flushes on a device without it")
	}

	if err := client.AtomicWrite(remote, 8, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, rpma.CompletionAlways, 4); err != nil {
		t.Fatal(err)
	}
	if wc := nextWC(t, client.CQ()); wc.WRID != 4 || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite {
		t.Fatalf("atomic write completion %+v, want a successful RDMA_WRITE", wc)
	}
	if !bytes.Equal(target.Bytes()[8:16], []byte{1, 2, 3, 4, 5, 6, 7, 8}) || client.NativeAtomicWrite() {
		t.Fatalf("atomic write: target % x, native %v", target.Bytes()[8:16], client.NativeAtomicWrite())
	}

	// The other role: the server flushes a region of the client's.
	back := regMR(t, cp, make([]byte, 64), rpma.UsageWriteDst|rpma.UsageFlushTypeVisibility)
	rback, err := rpma.RemoteMRFromDescriptor(back.Descriptor())
	if err != nil {
		t.Fatal(err)
	}
	ssrc := regMR(t, sp, []byte("the other way"), rpma.UsageWriteSrc)
	if err := server.Write(rback, 0, ssrc, 0, ssrc.Size(), rpma.CompletionOnError, 5); err != nil {
		t.Fatal(err)
	}
	if err := server.Flush(rback, 0, ssrc.Size(), rpma.FlushVisibility, rpma.CompletionAlways, 6); err != nil {
		t.Fatal(err)
	}
	if wc := nextWC(t, server.CQ()); wc.WRID != 6 || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead {
		t.Fatalf("server's flush completion %+v", wc)
	}
	if !bytes.Equal(back.Bytes()[:ssrc.Size()], ssrc.Bytes()) {
		t.Fatalf("client region holds %q", back.Bytes()[:ssrc.Size()])
	}
}

// nextWC waits for the next verbs completion of cq.
func nextWC(t testing.TB, cq *rpma.CQ) verbs.WC {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var wc [1]verbs.WC
		n, err := cq.GetWC(wc[:])
		if err == nil && n == 1 {
			return wc[0]
		}
		if err != nil && !errors.Is(err, rpma.ErrNoCompletion) {
			t.Fatalf("GetWC: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
		time.Sleep(time.Millisecond)
	}
}

// loopCM connects QPs of the loop device noNativeDev in this process:
// Listen registers a name, Dial hands the listener a request, Accept
// connects the two QPs (loop.Connect), Disconnect moves both to ERR.
type loopCM struct{}

var loopCMs = struct {
	sync.Mutex
	ls   map[string]*loopListener
	port atomic.Int64
}{ls: map[string]*loopListener{}}

func (loopCM) Name() string        { return "loopnf" }
func (loopCM) DeviceName() string  { return noNativeDev }
func (loopCM) MaxPrivateData() int { return 196 }

type loopAddr string

func (loopAddr) Network() string  { return "loopnf" }
func (a loopAddr) String() string { return string(a) }

func (loopCM) Listen(addr string, _ any) (cm.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if port == "0" {
		port = fmt.Sprint(loopCMs.port.Add(1))
	}
	a := net.JoinHostPort(host, port)
	loopCMs.Lock()
	defer loopCMs.Unlock()
	if loopCMs.ls[a] != nil {
		return nil, fmt.Errorf("%w: %s in use", verbs.ErrBusy, a)
	}
	l := &loopListener{addr: loopAddr(a), reqs: make(chan *loopReq, 8), done: make(chan struct{})}
	loopCMs.ls[a] = l
	return l, nil
}

func (loopCM) Dial(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	loopCMs.Lock()
	l := loopCMs.ls[addr]
	loopCMs.Unlock()
	if l == nil {
		return nil, &cm.RejectedError{Reason: "nobody listens at " + addr}
	}
	r := &loopReq{l: l, qp: qp, pd: p.PrivateData, reply: make(chan loopReply, 1)}
	select {
	case l.reqs <- r:
	case <-l.done:
		return nil, &cm.RejectedError{Reason: "listener closed"}
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", cm.ErrUnreachable, ctx.Err())
	}
	select {
	case rep := <-r.reply:
		if rep.conn == nil {
			return nil, &cm.RejectedError{PrivateData: rep.pd}
		}
		return rep.conn, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", cm.ErrUnreachable, ctx.Err())
	}
}

type loopListener struct {
	addr loopAddr
	reqs chan *loopReq
	done chan struct{}
	once sync.Once
}

func (l *loopListener) Next(ctx context.Context) (cm.Request, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, cm.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *loopListener) Addr() net.Addr { return l.addr }

func (l *loopListener) Close() error {
	l.once.Do(func() {
		loopCMs.Lock()
		delete(loopCMs.ls, string(l.addr))
		loopCMs.Unlock()
		close(l.done)
	})
	return nil
}

type loopReply struct {
	conn *loopConn
	pd   []byte
}

type loopReq struct {
	l     *loopListener
	qp    *verbs.QP
	pd    []byte
	reply chan loopReply
}

func (r *loopReq) PrivateData() []byte  { return r.pd }
func (r *loopReq) IRD() int             { return 16 }
func (r *loopReq) ORD() int             { return 16 }
func (r *loopReq) LocalAddr() net.Addr  { return r.l.addr }
func (r *loopReq) RemoteAddr() net.Addr { return loopAddr("client") }

func (r *loopReq) Accept(qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	if err := loop.Connect(r.qp, qp); err != nil {
		r.reply <- loopReply{}
		return nil, err
	}
	link := &loopLink{qps: [2]*verbs.QP{r.qp, qp}, done: make(chan struct{})}
	r.reply <- loopReply{conn: &loopConn{link: link, side: 0, pd: p.PrivateData, local: loopAddr("client"), remote: r.l.addr}}
	return &loopConn{link: link, side: 1, pd: r.pd, local: r.l.addr, remote: loopAddr("client")}, nil
}

func (r *loopReq) Reject(pd []byte) error {
	r.reply <- loopReply{pd: pd}
	return nil
}

// loopLink is a connection's shared state: who ended it.
type loopLink struct {
	qps  [2]*verbs.QP
	once sync.Once
	by   int
	done chan struct{}
}

type loopConn struct {
	link          *loopLink
	side          int
	pd            []byte
	local, remote loopAddr
}

func (c *loopConn) PrivateData() []byte  { return c.pd }
func (c *loopConn) IRD() int             { return 16 }
func (c *loopConn) ORD() int             { return 16 }
func (c *loopConn) LocalAddr() net.Addr  { return c.local }
func (c *loopConn) RemoteAddr() net.Addr { return c.remote }
func (c *loopConn) Done() <-chan struct{} {
	return c.link.done
}

func (c *loopConn) Err() error {
	if c.link.by == c.side {
		return cm.ErrLocalDisconnect
	}
	return cm.ErrPeerDisconnect
}

func (c *loopConn) Disconnect() error {
	c.link.once.Do(func() {
		c.link.by = c.side
		for _, q := range c.link.qps {
			q.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
		}
		close(c.link.done)
	})
	return nil
}
