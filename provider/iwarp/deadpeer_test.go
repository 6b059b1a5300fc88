package iwarp_test

// A peer that dies: killed mid-transfer (its kernel closes the socket with a
// FIN or RST), or vanished without a word (no FIN, no RST, nothing acked).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

const helperPeerEnv = "GOVERBS_IWARP_HELPER_PEER"

// Layout of the helper peer's buffer.
const (
	peerBuf      = 8 << 20
	peerRecvs    = 256 // receives posted, 1 KiB each at the start of the buffer
	peerHelloOff = 512 << 10
	peerWriteOff = 1 << 20 // the parent's Writes land in [1 MiB, 2 MiB)
	peerReadOff  = 2 << 20 // the parent reads from [2 MiB, 6 MiB)
)

// TestHelperPeer is not a test: it is the peer process of
// TestDeadPeerKilled, run when the environment names the parent's listener.
// It connects, tells the parent its memory with a Send, serves the parent's
// traffic, and sleeps until it is killed.
func TestHelperPeer(t *testing.T) {
	addr := os.Getenv(helperPeerEnv)
	if addr == "" {
		t.Skip("helper process of TestDeadPeerKilled")
	}
	// Should the parent die, its end of our stdin closes: go with it.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	s := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{
		Cap:     verbs.QPCap{MaxSendWR: 4, MaxRecvWR: peerRecvs, MaxSendSGE: 1, MaxRecvSGE: 1},
		BufSize: peerBuf, CQE: 1024,
	})
	toInit(t, s.QP)
	for i := range peerRecvs {
		s.MustPostRecv(t, s.Recv(uint64(i), i<<10, 1<<10))
	}
	conformance.Fill(s.Buf[peerReadOff:], 11)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := iwarp.Dial(ctx, addr, s.QP, iwarp.Params{IRD: 16, ORD: 16}, nil); err != nil {
		t.Fatal(err)
	}
	hello := s.Buf[peerHelloOff : peerHelloOff+20]
	binary.BigEndian.PutUint32(hello[0:], s.MR.RKey())
	binary.BigEndian.PutUint64(hello[4:], s.MR.Addr())
	binary.BigEndian.PutUint32(hello[12:], uint32(s.MR.Len()))
	binary.BigEndian.PutUint32(hello[16:], peerRecvs)
	s.MustPostSend(t, s.Send(1, peerHelloOff, len(hello)))
	if wc := conformance.Poll1(t, s.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("hello: %s", conformance.Describe(wc))
	}
	fmt.Println("helper peer: connected")
	time.Sleep(2 * time.Minute) // the parent kills us long before
	t.Fatal("helper peer: not killed")
}

// toInit moves a QP to INIT, so that receives can be posted before it
// connects.
func toInit(t testing.TB, qp *verbs.QP) {
	t.Helper()
	if err := conformance.ToInit(qp, verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
}

// TestDeadPeerKilled: the peer process is killed (SIGKILL) while this side
// has a stream of RDMA Writes, Reads and Sends in flight. Every work request
// must complete (success for those done before, WR_FLUSH_ERR for the rest),
// the QP must end in ERR and the connection must end.
func TestDeadPeerKilled(t *testing.T) {
	leakcheck.Check(t)
	s := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{
		Cap:     verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1},
		BufSize: 4 << 20, CQE: 4096,
	})
	toInit(t, s.QP)
	s.MustPostRecv(t, s.Recv(1000, 0, 64), s.Recv(1001, 64, 64))
	ln, err := iwarp.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPeer$", "-test.timeout=3m", "-test.v")
	cmd.Env = append(os.Environ(), helperPeerEnv+"="+ln.Addr().String())
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		stdin.Close()
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("helper peer output:\n%s", out.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	conn, err := req.Accept(s.QP, iwarp.Params{IRD: 16, ORD: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Disconnect() })
	wc := conformance.Poll1(t, s.RecvCQ)
	if wc.WRID != 1000 || wc.Status != verbs.WCSuccess || wc.ByteLen != 20 {
		t.Fatalf("hello: %s", conformance.Describe(wc))
	}
	rkey := binary.BigEndian.Uint32(s.Buf[0:])
	raddr := binary.BigEndian.Uint64(s.Buf[4:])
	if n := binary.BigEndian.Uint32(s.Buf[12:]); n != peerBuf {
		t.Fatalf("hello: peer buffer %d", n)
	}
	maxSends := int(binary.BigEndian.Uint32(s.Buf[16:]))

	// The stream: Write 256 KiB, Read 1 MiB, Send 1 KiB, over and over
	// (a Write instead of a Send once the peer's receives are used up).
	var ids []uint64 // wr_ids posted, in order
	var reads []uint64
	wrFor := func(i int) verbs.SendWR {
		id := uint64(i)
		switch {
		case i%3 == 1:
			reads = append(reads, id)
			return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{s.MR.SGE(2<<20, 1<<20)}, RemoteAddr: raddr + peerReadOff + uint64(i%4)*(1<<20), RKey: rkey}
		case i%3 == 2 && maxSends > 0:
			maxSends--
			return verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.MR.SGE(4096, 1024)}}
		}
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{s.MR.SGE(1<<20, 256<<10)}, RemoteAddr: raddr + peerWriteOff + uint64(i%4)*(256<<10), RKey: rkey}
	}
	done := map[uint64]verbs.WCStatus{}
	wcs := make([]verbs.WC, 64)
	poll := func() {
		n, err := s.SendCQ.Poll(wcs)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		for _, wc := range wcs[:n] {
			if _, dup := done[wc.WRID]; dup {
				t.Fatalf("wr_id %d completed twice", wc.WRID)
			}
			done[wc.WRID] = wc.Status
		}
	}
	readsOut := func() int {
		n := 0
		for _, id := range reads {
			if _, ok := done[id]; !ok {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	var pending *verbs.SendWR
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no kill point reached: %d posted, %d completed, %d reads outstanding", len(ids), len(done), readsOut())
		}
		poll()
		for id, st := range done {
			if st != verbs.WCSuccess {
				t.Fatalf("wr_id %d failed before the peer was killed: %v (%v)", id, st, conn.Err())
			}
		}
		// Kill once enough has completed and Reads are in flight.
		if len(done) >= 30 && readsOut() >= 4 {
			break
		}
		if pending == nil {
			wr := wrFor(len(ids))
			pending = &wr
		}
		if err := s.QP.PostSend([]verbs.SendWR{*pending}); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			t.Fatalf("PostSend: %v", err)
		}
		ids = append(ids, pending.WRID)
		pending = nil
	}
	// Freeze the peer, then post a few more Reads: they can only end
	// flushed. Without this, a loaded machine let the peer answer everything
	// in flight before the kill landed, and the test had nothing to check.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for extra := 0; extra < 4; {
		if pending == nil {
			wr := wrFor(len(ids))
			pending = &wr
		}
		if err := s.QP.PostSend([]verbs.SendWR{*pending}); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				break
			}
			t.Fatalf("PostSend: %v", err)
		}
		if pending.Opcode == verbs.WRRDMARead {
			extra++
		}
		ids = append(ids, pending.WRID)
		pending = nil
	}
	before := len(done)
	var outstanding []uint64
	for _, id := range ids {
		if _, ok := done[id]; !ok {
			outstanding = append(outstanding, id)
		}
	}

	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}

	// Every outstanding request completes, within a bound that is only a hang guard.
	guardEnd := time.Now().Add(20 * time.Second)
	for {
		poll()
		missing := 0
		for _, id := range outstanding {
			if _, ok := done[id]; !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(guardEnd) {
			t.Fatalf("%d of %d outstanding work requests never completed (QP %v, conn %v; %s)", missing, len(outstanding), s.QP.State(), conn.Err(), iwarp.DebugState(s.QP))
		}
		time.Sleep(time.Millisecond)
	}
	stdin.Close()
	werr := cmd.Wait()
	waited = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("helper peer ended with %v, want killed by SIGKILL", werr)
	}
	conformance.WaitState(t, s.QP, verbs.QPSErr)
	select {
	case <-conn.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("conn.Done() not closed (err %v)", conn.Err())
	}
	if conn.Err() == nil {
		t.Error("the connection ended without an error")
	}

	// Statuses: success (done before the peer died, or handed to TCP before
	// the connection broke), WR_FLUSH_ERR, and at most one LOC_QP_OP_ERR: the
	// request being written when the socket failed (siw reports the same).
	counts := map[verbs.WCStatus]int{}
	for _, id := range outstanding {
		counts[done[id]]++
	}
	for st, n := range counts {
		switch st {
		case verbs.WCSuccess, verbs.WCWRFlushErr:
		case verbs.WCLocQPOpErr:
			if n > 1 {
				t.Errorf("%d requests completed with %v, want at most the one in transmission", n, st)
			}
		default:
			t.Errorf("%d requests completed with %v", n, st)
		}
	}
	if counts[verbs.WCWRFlushErr] == 0 {
		t.Errorf("no outstanding request was flushed (%v): the kill came too late to test anything", counts)
	}
	// The unused receive is flushed too.
	rwc := conformance.Poll1(t, s.RecvCQ)
	if rwc.WRID != 1001 || rwc.Status != verbs.WCWRFlushErr {
		t.Errorf("receive: %s, want wr_id 1001 flushed", conformance.Describe(rwc))
	}
	conformance.ExpectEmpty(t, s.SendCQ)
	t.Logf("%d requests completed before the kill; of the %d outstanding: %v; connection error: %v", before, len(outstanding), counts, conn.Err())
}

// blackHole is a TCP proxy that forwards bytes both ways until black() is
// called; it then neither forwards nor reads, and keeps the sockets open.
type blackHole struct {
	ln     net.Listener
	target string
	hole   chan struct{}
	quit   chan struct{}
	parked sync.WaitGroup // the two forwarders, once they stopped reading
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// smallRcvBuf makes the proxy's receive windows small, so that a sender
// fills them quickly once the proxy stops reading.
func smallRcvBuf(network, address string, c syscall.RawConn) error {
	var serr error
	c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<10) })
	return serr
}

func startBlackHole(t testing.TB, target string) *blackHole {
	t.Helper()
	lc := net.ListenConfig{Control: smallRcvBuf}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackHole{ln: ln, target: target, hole: make(chan struct{}), quit: make(chan struct{})}
	p.parked.Add(2)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// serve proxies one connection.
func (p *blackHole) serve() {
	defer p.wg.Done()
	down, err := p.ln.Accept()
	if err != nil {
		p.parked.Add(-2)
		return
	}
	d := net.Dialer{Control: smallRcvBuf}
	up, err := d.Dial("tcp", p.target)
	if err != nil {
		down.Close()
		p.parked.Add(-2)
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, down, up)
	p.mu.Unlock()
	p.wg.Add(2)
	go p.forward(up, down)
	go p.forward(down, up)
}

func (p *blackHole) forward(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-p.hole:
			p.parked.Done()
			<-p.quit
			return
		default:
		}
		// Short read deadlines, so that the hole is noticed without a
		// read in progress: from then on, nothing is read.
		src.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.hole: // too late: drop it
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			p.parked.Done()
			<-p.quit
			return
		}
	}
}

// black stops forwarding and reading; it returns once neither direction reads.
func (p *blackHole) black() {
	close(p.hole)
	p.parked.Wait()
}

func (p *blackHole) close() {
	select {
	case <-p.quit:
		return
	default:
	}
	close(p.quit)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestDeadPeerBlackHole: the path to the peer turns into a black hole (no
// FIN, no RST, nothing read any more). An RDMA Read posted afterwards must
// complete with WR_FLUSH_ERR within about DeadPeerTimeout.
//
// How the provider detects it: each connection's socket has TCP_USER_TIMEOUT
// set to DeadPeerTimeout and TCP keepalive enabled (idle DeadPeerTimeout/3,
// interval DeadPeerTimeout/6, 3 probes, at least 1 s each). A peer that
// really vanished (host down, cable cut, a firewall dropping everything)
// acknowledges nothing: data we send stays unacknowledged, and once it has
// been so for TCP_USER_TIMEOUT the kernel aborts the connection with
// ETIMEDOUT, which the receive side reads as an error and turns into the
// QP's flush; with nothing to send, the keepalive probes go unanswered and
// the kernel aborts the connection the same way (TCP_USER_TIMEOUT also caps
// how long unanswered keepalives may last).
//
// In one process the peer's kernel is alive and acknowledges whatever
// reaches its socket (data and keepalive probes alike), so a black hole can
// only be made the way a live endpoint makes one: the proxy stops reading.
// Its receive window (made small with SO_RCVBUF) fills, then closes; the
// Write posted first fills it, so the Read Request never gets out of our
// send queue. TCP then probes the zero window, the probes are answered with
// a zero window forever, and Linux applies TCP_USER_TIMEOUT to that too: once
// the window has stayed shut for DeadPeerTimeout the connection is aborted
// with ETIMEDOUT. (A Read alone would be acknowledged by the proxy's kernel
// and wait for its response for ever: the idle-peer case, where only
// keepalive helps, cannot be shown with a peer whose kernel answers.)
func TestDeadPeerBlackHole(t *testing.T) {
	leakcheck.Check(t)
	cfg := &iwarp.Config{DeadPeerTimeout: 2 * time.Second} // for both ends

	opts := conformance.PairOpts{BufSize: 4 << 20}
	a := conformance.NewSide(t, open(t), verbs.QPTRC, opts)
	b := conformance.NewSide(t, open(t), verbs.QPTRC, opts)
	ln, err := iwarp.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	proxy := startBlackHole(t, ln.Addr().String())

	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	type res struct {
		c   *iwarp.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := r.Accept(b.QP, iwarp.Params{IRD: 4, ORD: 4})
		ch <- res{c, err}
	}()
	ca, err := iwarp.Dial(ctx, proxy.ln.Addr().String(), a.QP, iwarp.Params{IRD: 4, ORD: 4}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Disconnect() })
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	cb := r.c
	t.Cleanup(func() { cb.Disconnect() })

	read := func(id uint64) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()}
	}
	// The path works.
	a.MustPostSend(t, read(1))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMARead)

	proxy.black()
	start := time.Now()
	// The Write fills the proxy's window; the Read is queued behind it.
	// PostSend does not wait for the socket (nonblock_test.go).
	if err := a.QP.PostSend([]verbs.SendWR{
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 1<<20)},
			RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
		read(3),
	}); err != nil {
		t.Fatalf("PostSend: %v", err)
	}
	var wcs []verbs.WC
	end := time.Now().Add(30 * time.Second) // hang guard
	buf := make([]verbs.WC, 2)
	for len(wcs) < 2 {
		n, err := a.SendCQ.Poll(buf[:2-len(wcs)])
		if err != nil {
			t.Fatal(err)
		}
		wcs = append(wcs, buf[:n]...)
		if time.Now().After(end) {
			t.Fatalf("the Read did not complete within 30 s of the black hole (QP %v; %s)", a.QP.State(), iwarp.DebugState(a.QP))
		}
		if n == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The Write was handed to TCP (success) or failed in the write
	// (LOC_QP_OP_ERR) or, partly written, was flushed; the Read never got
	// out and is flushed.
	if w := wcs[0]; w.WRID != 2 || (w.Status != verbs.WCSuccess && w.Status != verbs.WCLocQPOpErr && w.Status != verbs.WCWRFlushErr) {
		t.Errorf("Write: %s", conformance.Describe(w))
	}
	conformance.ExpectWC(t, wcs[1], 3, verbs.WCWRFlushErr, verbs.WCRDMARead)
	conformance.WaitState(t, a.QP, verbs.QPSErr)
	waitDone(t, ca)
	// The kernel reports the timeout (ETIMEDOUT) once, to whichever call
	// touches the socket first; when that is the blocked write, the reader
	// then sees end-of-file.
	if err := ca.Err(); !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, iwarp.ErrDisconnected) {
		t.Errorf("connection error %v, want ETIMEDOUT (TCP_USER_TIMEOUT)", err)
	}
	t.Logf("detected after %v: %v", time.Since(start).Round(time.Millisecond), ca.Err())
}
