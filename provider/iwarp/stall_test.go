package iwarp_test

// A peer that begins a frame and never finishes it (Config.FrameTimeout).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// pollMode is how a test's application waits for its completions.
type pollMode struct {
	name   string
	polled bool // busy-polls the CQ (polled mode) instead of sleeping between polls
}

var pollModes = []pollMode{{"automatic", false}, {"polled", true}}

// pollWCs polls cq for n completions until guard, busy (polled mode) or
// sleeping between empty polls (automatic progress), and reports whether
// the QP was in polled mode at some point meanwhile.
func pollWCs(t testing.TB, cq *verbs.CQ, qp *verbs.QP, n int, busy bool) ([]verbs.WC, bool) {
	t.Helper()
	var out []verbs.WC
	buf := make([]verbs.WC, n)
	sawPolled := false
	for end := time.Now().Add(guard); len(out) < n; {
		k, err := cq.Poll(buf[:n-len(out)])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		sawPolled = sawPolled || iwarp.Polled(qp)
		if time.Now().After(end) {
			t.Fatalf("%d of %d completions after %v (QP %v)", len(out), n, guard, qp.State())
		}
		if k == 0 && !busy {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return out, sawPolled
}

// TestFrameStall: a peer that stops inside a frame (in its length, its
// header, its payload or before its CRC) is cut off once FrameTimeout has
// passed without a byte: a Terminate (LLP/MPA, stream lost), the
// connection closed, the QP in ERR with QP_FATAL, every receive flushed,
// whether the receive side is driven by its goroutine or by the
// application's polls.
func TestFrameStall(t *testing.T) {
	const bound = 300 * time.Millisecond
	send := fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(64)), false)
	parts := []struct {
		name string
		b    []byte
	}{
		{"one byte of the length", send[:1]},
		{"header in part", send[:9]},
		{"payload in part", send[:wire.UntaggedHeaderLen+10]},
		{"no CRC", send[:len(send)-wire.CRCLen]},
	}
	for _, m := range pollModes {
		for _, p := range parts {
			t.Run(m.name+"/"+p.name, func(t *testing.T) {
				leakcheck.Check(t)
				r := startResponder(t, respOpts{cfg: &iwarp.Config{FrameTimeout: bound}})
				s := r.side
				s.MustPostRecv(t, s.Recv(100, 0, 128), s.Recv(101, 128, 128))
				if m.polled {
					// The application polls before the bytes come, so
					// its polls are what reads them.
					pollUpTo(t, s.RecvCQ, 1, 20*time.Millisecond)
				}
				r.raw.write(t, p.b)
				sent := time.Now()
				wcs, sawPolled := pollWCs(t, s.RecvCQ, s.QP, 2, m.polled)
				for i, wc := range wcs {
					conformance.ExpectWC(t, wc, 100+uint64(i), verbs.WCWRFlushErr, 0)
				}
				if m.polled && !sawPolled {
					t.Error("the QP never was in polled mode")
				}
				info := r.raw.readTerminate(t)
				if d := time.Since(sent); d < bound {
					t.Errorf("cut off %v after its last byte, before the bound (%v)", d, bound)
				}
				if want := wire.TermMPA(wire.MPAStreamLost); info.RFC.Cause != want {
					t.Errorf("Terminate cause %v, want %v", info.RFC.Cause, want)
				}
				r.raw.expectClosed(t)
				waitDone(t, r.conn)
				var te *iwarp.TerminateError
				if err := r.conn.Err(); !errors.As(err, &te) || !te.Sent || te.Cause != wire.TermMPA(wire.MPAStreamLost) {
					t.Errorf("conn.Err() = %v, want the Terminate sent", err)
				}
				if st := s.QP.State(); st != verbs.QPSErr {
					t.Errorf("QP in %v", st)
				}
				if ev := conformance.NextEvent(t, s.Ctx); ev.Type != verbs.EventQPFatal || ev.QP != s.QP {
					t.Errorf("async event %v, want QP_FATAL for the QP", ev.Type)
				}
			})
		}
	}
}

// TestFrameSlowPeer: a peer that sends a frame a few bytes at a time,
// each gap well under FrameTimeout and the whole several times longer, is
// not cut off: the message arrives whole, and the connection carries on.
func TestFrameSlowPeer(t *testing.T) {
	const bound = time.Second
	for _, m := range pollModes {
		t.Run(m.name, func(t *testing.T) {
			leakcheck.Check(t)
			r := startResponder(t, respOpts{cfg: &iwarp.Config{FrameTimeout: bound}})
			s := r.side
			s.MustPostRecv(t, s.Recv(100, 0, 256), s.Recv(101, 256, 256))
			data := payload(200)
			send := fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, data), false)
			gap := bound / 5
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				defer close(done)
				for b := send; len(b) > 0; {
					n := min(len(b), len(send)/10+1)
					r.raw.nc.SetWriteDeadline(time.Now().Add(guard))
					if _, err := r.raw.nc.Write(b[:n]); err != nil {
						done <- err
						return
					}
					b = b[n:]
					if len(b) > 0 {
						time.Sleep(gap)
					}
				}
			}()
			wcs, _ := pollWCs(t, s.RecvCQ, s.QP, 1, m.polled)
			if err := <-done; err != nil {
				t.Fatalf("the slow peer's write: %v", err)
			}
			took := time.Since(start)
			conformance.ExpectWC(t, wcs[0], 100, verbs.WCSuccess, verbs.WCRecv)
			if wcs[0].ByteLen != uint32(len(data)) || !bytes.Equal(s.Buf[:len(data)], data) {
				t.Fatalf("received %d bytes, not the %d sent", wcs[0].ByteLen, len(data))
			}
			// The connection carries on: a second message, whole.
			r.raw.write(t, fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 2, 0, data[:16]), false))
			wcs, _ = pollWCs(t, s.RecvCQ, s.QP, 1, m.polled)
			conformance.ExpectWC(t, wcs[0], 101, verbs.WCSuccess, verbs.WCRecv)
			if err := r.conn.Err(); err != nil {
				t.Fatalf("connection ended: %v", err)
			}
			t.Logf("one frame in 11 writes %v apart took %v (FrameTimeout %v)", gap, took.Round(time.Millisecond), bound)
		})
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestManyStalledFrames: 1,000 connections that complete the MPA
// exchange, send the first byte of an FPDU and nothing more, all at once.
// Meanwhile a real client connects, its SEND and WRITE arrive whole, and
// it disconnects; every stalled connection is then cut off with a
// Terminate within the bound (and half of it again, plus slack), and the
// listener's goroutines and descriptors are returned.
func TestManyStalledFrames(t *testing.T) {
	leakcheck.Check(t)
	const (
		stalled = 1000
		bound   = 2 * time.Second
		slack   = 3 * time.Second // a loaded machine; a hang guard, not a measurement
	)
	// Each stalled connection takes two descriptors in this process, its
	// two ends; Go raises the soft limit to the hard one at start, but a
	// hard limit of 1,024 is not rare.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if need := uint64(2*stalled + 512); lim.Cur < need {
		raised := lim
		raised.Cur = need
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			t.Fatalf("%d descriptors needed, the limit is %d (hard %d): %v", need, lim.Cur, lim.Max, err)
		}
		defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	fds0 := openFDs(t)
	g0 := runtime.NumGoroutine()
	ln, err := iwarp.Listen("127.0.0.1:0", &iwarp.Config{FrameTimeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// The listener's side: one PD and CQ for the stalled connections' QPs.
	sctx := open(t)
	pd, err := sctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := sctx.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	real := conformance.NewSide(t, sctx, verbs.QPTRC, conformance.PairOpts{})
	var (
		mu    sync.Mutex
		conns []*iwarp.Conn
		qps   []*verbs.QP
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Disconnect()
		}
		for _, q := range qps {
			q.Destroy()
		}
	}()
	actx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	realConn := make(chan *iwarp.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			req, err := ln.Accept(actx)
			if err != nil {
				acceptErr <- err
				return
			}
			if bytes.Equal(req.PrivateData(), []byte("real")) {
				c, err := req.Accept(real.QP, iwarp.Params{})
				if err != nil {
					acceptErr <- err
					return
				}
				realConn <- c
				continue
			}
			qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
				Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				req.Reject(nil)
				acceptErr <- err
				return
			}
			c, err := req.Accept(qp, iwarp.Params{})
			mu.Lock()
			qps = append(qps, qp)
			if err == nil {
				conns = append(conns, c)
			}
			mu.Unlock()
			if err != nil {
				acceptErr <- err
				return
			}
		}
	}()

	// The stalled peers: MPA Request, Reply, then at a signal one byte.
	req, err := wire.NewRequest(wire.Local{})
	if err != nil {
		t.Fatal(err)
	}
	frame, err := wire.AppendMPA(nil, &req)
	if err != nil {
		t.Fatal(err)
	}
	type peerResult struct {
		cut time.Duration // from the byte to the Terminate
		err error
	}
	results := make(chan peerResult, stalled)
	ready := make(chan struct{}, stalled)
	var go1 sync.WaitGroup
	go1.Add(1)
	var peers sync.WaitGroup
	for i := range stalled {
		nc, err := net.DialTimeout("tcp", ln.Addr().String(), guard)
		if err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		p := &rawPeer{nc: nc.(*net.TCPConn)}
		peers.Add(1)
		go func() {
			defer peers.Done()
			defer p.nc.Close()
			res := func(cut time.Duration, err error) { results <- peerResult{cut, err} }
			p.nc.SetWriteDeadline(time.Now().Add(guard))
			if _, err := p.nc.Write(frame); err != nil {
				ready <- struct{}{}
				res(0, err)
				return
			}
			if _, err := p.readMPA(); err != nil {
				ready <- struct{}{}
				res(0, fmt.Errorf("MPA Reply: %w", err))
				return
			}
			ready <- struct{}{}
			go1.Wait()
			if _, err := p.nc.Write([]byte{0}); err != nil {
				res(0, err)
				return
			}
			sent := time.Now()
			p.nc.SetReadDeadline(sent.Add(bound*3/2 + slack))
			f, err := p.readFPDU()
			cut := time.Since(sent)
			if err != nil {
				res(cut, fmt.Errorf("no Terminate: %w", err))
				return
			}
			h := wire.Header(f[:wire.MPALenLen+int(binary.BigEndian.Uint16(f))])
			if h.Opcode() != wire.OpTerminate {
				res(cut, fmt.Errorf("opcode %v instead of a Terminate", h.Opcode()))
				return
			}
			if info, err := wire.ParseTerminate(h); err != nil || info.RFC.Cause != wire.TermMPA(wire.MPAStreamLost) {
				res(cut, fmt.Errorf("Terminate %+v (%v), want LLP/MPA stream lost", info.RFC.Cause, err))
				return
			}
			// Then the end of the stream.
			if _, err := p.nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				res(cut, fmt.Errorf("after the Terminate: %v, want EOF", err))
				return
			}
			res(cut, nil)
		}()
	}
	for range stalled {
		<-ready
	}
	setup := time.Now()
	go1.Done() // every stalled peer sends its byte now
	t.Logf("%d connections set up", stalled)

	// A real client is served meanwhile.
	cli := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	dctx, dcancel := context.WithTimeout(context.Background(), guard)
	defer dcancel()
	cc, err := iwarp.Dial(dctx, ln.Addr().String(), cli.QP, iwarp.Params{PrivateData: []byte("real")}, nil)
	if err != nil {
		t.Fatalf("the real client was not served: %v", err)
	}
	var sc *iwarp.Conn
	select {
	case sc = <-realConn:
	case err := <-acceptErr:
		t.Fatal(err)
	}
	conformance.Fill(cli.Buf[:4096], 7)
	real.MustPostRecv(t, real.Recv(1, 0, 1024))
	cli.MustPostSend(t, cli.Send(2, 0, 1024), verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{cli.MR.SGE(1024, 3072)}, RemoteAddr: real.MR.RemoteAddr(1024), RKey: real.MR.RKey()})
	conformance.ExpectWC(t, conformance.Poll1(t, real.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
	ws := conformance.PollN(t, cli.SendCQ, 2)
	conformance.ExpectWC(t, ws[0], 2, verbs.WCSuccess, verbs.WCSend)
	conformance.ExpectWC(t, ws[1], 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	// The WRITE completed at hand-off: a SEND behind it shows it placed.
	real.MustPostRecv(t, real.Recv(4, 0, 8))
	cli.MustPostSend(t, cli.Send(5, 0, 8))
	conformance.ExpectWC(t, conformance.Poll1(t, real.RecvCQ), 4, verbs.WCSuccess, verbs.WCRecv)
	conformance.Poll1(t, cli.SendCQ)
	if !bytes.Equal(real.Buf[:4096], cli.Buf[:4096]) {
		t.Fatal("the real client's SEND or WRITE arrived changed")
	}
	cc.Disconnect()
	waitDone(t, sc)
	served := time.Since(setup)
	mu.Lock()
	stillOpen := 0
	for _, c := range conns {
		select {
		case <-c.Done():
		default:
			stillOpen++
		}
	}
	mu.Unlock()
	t.Logf("the real client was served in %v, with %d stalled connections open", served.Round(time.Millisecond), stillOpen)

	// Every stalled connection is cut off within the bound.
	var worst time.Duration
	for range stalled {
		r := <-results
		if r.err != nil {
			t.Fatalf("stalled peer: %v", r.err)
		}
		if r.cut < bound {
			t.Fatalf("a stalled peer was cut off %v after its byte, before the bound (%v)", r.cut, bound)
		}
		worst = max(worst, r.cut)
	}
	peers.Wait()
	mu.Lock()
	if len(conns) != stalled {
		t.Fatalf("%d stalled connections accepted, want %d", len(conns), stalled)
	}
	for i, c := range conns {
		select {
		case <-c.Done():
		case <-time.After(guard):
			t.Fatalf("stalled connection %d did not end (err %v)", i, c.Err())
		}
		var te *iwarp.TerminateError
		if !errors.As(c.Err(), &te) || !te.Sent || te.Cause != wire.TermMPA(wire.MPAStreamLost) {
			t.Fatalf("stalled connection %d ended with %v", i, c.Err())
		}
	}
	mu.Unlock()
	t.Logf("all %d stalled connections cut off, the last %v after its byte (FrameTimeout %v)", stalled, worst.Round(time.Millisecond), bound)

	// Their goroutines and descriptors are returned.
	for end := time.Now().Add(guard); ; time.Sleep(10 * time.Millisecond) {
		g, fds := runtime.NumGoroutine()-g0, openFDs(t)-fds0
		if g < 20 && fds < 10 {
			t.Logf("%d goroutines and %d descriptors more than before", g, fds)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d goroutines and %d descriptors more than before", g, fds)
		}
	}
}

// TestFrameTimeoutOff: with a negative FrameTimeout a frame may pause as
// long as it likes (siw's behaviour): the connection stays, and the frame
// completes when its bytes come.
func TestFrameTimeoutOff(t *testing.T) {
	leakcheck.Check(t)
	r := startResponder(t, respOpts{cfg: &iwarp.Config{FrameTimeout: -1}})
	s := r.side
	s.MustPostRecv(t, s.Recv(100, 0, 128))
	send := fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(64)), false)
	r.raw.write(t, send[:1])
	time.Sleep(500 * time.Millisecond) // longer than any bound the other tests set
	if err := r.conn.Err(); err != nil {
		t.Fatalf("connection ended: %v", err)
	}
	r.raw.write(t, send[1:])
	wcs, _ := pollWCs(t, s.RecvCQ, s.QP, 1, false)
	conformance.ExpectWC(t, wcs[0], 100, verbs.WCSuccess, verbs.WCRecv)
}

// TestFrameStallInitiator: the bound protects a connection made by Dial
// too: a server that answers the MPA Request and then sends one byte of a
// frame is cut off the same way.
func TestFrameStallInitiator(t *testing.T) {
	leakcheck.Check(t)
	const bound = 300 * time.Millisecond
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	type served struct {
		term wire.TerminateInfo
		err  error
	}
	res := make(chan served, 1)
	go func() {
		nc, err := tl.Accept()
		if err != nil {
			res <- served{err: err}
			return
		}
		p := &rawPeer{nc: nc.(*net.TCPConn)}
		defer p.nc.Close()
		req, err := p.readMPA()
		if err != nil {
			res <- served{err: err}
			return
		}
		reply, _, err := wire.NegotiateResponder(req, wire.Local{IRD: 1, ORD: 1})
		if err != nil {
			res <- served{err: err}
			return
		}
		b, err := wire.AppendMPA(nil, &reply)
		if err == nil {
			_, err = p.nc.Write(append(b, 0)) // the Reply and one byte of an FPDU
		}
		for err == nil {
			// Whatever comes before it (the start-up nudge), then the Terminate.
			var f []byte
			if f, err = p.readFPDU(); err == nil {
				if h := wire.Header(f[:wire.MPALenLen+int(binary.BigEndian.Uint16(f))]); h.Opcode() == wire.OpTerminate {
					info, err := wire.ParseTerminate(h)
					res <- served{info, err}
					return
				}
			}
		}
		res <- served{err: err}
	}()
	s := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	toInit(t, s.QP)
	s.MustPostRecv(t, s.Recv(100, 0, 64))
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	c, err := iwarp.Dial(ctx, tl.Addr().String(), s.QP, iwarp.Params{IRD: 1, ORD: 1}, &iwarp.Config{FrameTimeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	wcs, _ := pollWCs(t, s.RecvCQ, s.QP, 1, false)
	conformance.ExpectWC(t, wcs[0], 100, verbs.WCWRFlushErr, 0)
	r := <-res
	if r.err != nil {
		t.Fatalf("the server saw no Terminate: %v", r.err)
	}
	if want := wire.TermMPA(wire.MPAStreamLost); r.term.RFC.Cause != want {
		t.Errorf("Terminate cause %v, want %v", r.term.RFC.Cause, want)
	}
	waitDone(t, c)
	var te *iwarp.TerminateError
	if err := c.Err(); !errors.As(err, &te) || !te.Sent {
		t.Errorf("conn.Err() = %v, want the Terminate sent", err)
	}
}
