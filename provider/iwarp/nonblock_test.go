package iwarp_test

// PostSend never waits for the peer: a peer that stops reading (a zero
// window, a stopped process) fills the socket, and then the send queue,
// which makes PostSend fail with ErrQueueFull (the ENOMEM of
// ibv_post_send); the transmit goroutine writes what the socket did not
// take once there is room.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// postGuard bounds a single PostSend. It is a hang guard far above what a
// post costs and far below the dead-peer timeout a blocking post would
// wait for; it is not a performance assertion.
const postGuard = 2 * time.Second

// fillUnique writes a pattern that differs in every 8-byte word of b (for
// seed and b's offset base), so that misplaced or reordered data shows.
func fillUnique(b []byte, seed, base uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], seed<<48|(base+uint64(i)))
	}
}

// postTimed posts wr and fails the test when PostSend does not return
// within postGuard; it returns PostSend's error and how long it took.
func postTimed(t *testing.T, qp *verbs.QP, wr verbs.SendWR) (time.Duration, error) {
	t.Helper()
	type res struct {
		d   time.Duration
		err error
	}
	ch := make(chan res, 1)
	go func() {
		start := time.Now()
		err := qp.PostSend([]verbs.SendWR{wr})
		ch <- res{time.Since(start), err}
	}()
	select {
	case r := <-ch:
		return r.d, r.err
	case <-time.After(postGuard):
		t.Fatalf("PostSend of wr_id %d blocked for more than %v (%s)", wr.WRID, postGuard, iwarp.DebugState(qp))
		return 0, nil
	}
}

// fillQueue posts the requests next(0), next(1), ... until PostSend fails
// with ErrQueueFull, checking that every PostSend returns promptly. The
// request that did not fit is not posted. It returns how many were posted
// and the longest PostSend.
func fillQueue(t *testing.T, qp *verbs.QP, next func(i int) verbs.SendWR, unpost func()) (int, time.Duration) {
	t.Helper()
	var longest time.Duration
	for i := 0; ; i++ {
		if i == 5000 {
			t.Fatalf("the send queue never filled: %d requests posted to a peer that does not read (%s)", i, iwarp.DebugState(qp))
		}
		d, err := postTimed(t, qp, next(i))
		longest = max(longest, d)
		if err != nil {
			if !errors.Is(err, verbs.ErrQueueFull) {
				t.Fatalf("PostSend %d: %v, want ErrQueueFull or success", i, err)
			}
			var pe *verbs.PostError
			if !errors.As(err, &pe) || pe.Index != 0 {
				t.Fatalf("PostSend %d: %v, want a *verbs.PostError for the request", i, err)
			}
			unpost()
			return i, longest
		}
	}
}

// collect polls cq until the completions of every wr_id in ids arrived or
// guard passed; it fails on a duplicate or an unknown wr_id.
func collect(t *testing.T, cq *verbs.CQ, ids []uint64, got map[uint64]verbs.WC) []verbs.WC {
	t.Helper()
	want := map[uint64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var order []verbs.WC
	buf := make([]verbs.WC, 32)
	end := time.Now().Add(guard)
	for len(got) < len(ids) {
		n, err := cq.Poll(buf)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		for _, wc := range buf[:n] {
			if !want[wc.WRID] {
				t.Fatalf("completion of an unknown wr_id: %s", conformance.Describe(wc))
			}
			if _, dup := got[wc.WRID]; dup {
				t.Fatalf("wr_id %d completed twice", wc.WRID)
			}
			got[wc.WRID] = wc
			order = append(order, wc)
		}
		if n == 0 {
			if time.Now().After(end) {
				t.Fatalf("%d of %d work requests completed within %v", len(got), len(ids), guard)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return order
}

// checkFlushedTail checks the completions, in posting order, of requests to
// a peer that never read and then went: every Read is flushed (it was never
// answered), and of the Writes and Sends, which TCP takes in order, those it
// took succeed and the rest, the one that was partly written first, are
// flushed.
func checkFlushedTail(t *testing.T, wcs []verbs.WC, ids []uint64) {
	t.Helper()
	flushed := 0
	for i, wc := range wcs {
		if wc.WRID != ids[i] {
			t.Fatalf("completion %d is wr_id %d, want %d (posting order)", i, wc.WRID, ids[i])
		}
		switch {
		case wc.Status == verbs.WCWRFlushErr:
			if wc.Opcode != verbs.WCRDMARead {
				flushed++
			}
		case wc.Status == verbs.WCSuccess && wc.Opcode != verbs.WCRDMARead && flushed == 0:
		default:
			t.Fatalf("completion %d: %s, want success for the Writes and Sends TCP took, WR_FLUSH_ERR for the rest", i, conformance.Describe(wc))
		}
	}
	if flushed == 0 {
		t.Fatal("no Write or Send was flushed, though the queue was full when the connection ended")
	}
	t.Logf("%d requests completed, %d Writes and Sends flushed", len(wcs), flushed)
}

// TestPostSendPeerNeverReads: a raw peer completes the MPA exchange and
// never reads. Large RDMA Writes (with a Read and a Send among them) fill
// the socket and then the send queue: every PostSend returns at once, and
// the first that finds the queue full fails with ErrQueueFull, while one
// message stays partly written. When the peer then goes (it closes its
// socket, or the dead-peer timeout ends a connection whose window stayed
// shut), every outstanding request completes, the partly written one with
// WR_FLUSH_ERR like the rest.
func TestPostSendPeerNeverReads(t *testing.T) {
	for _, end := range []string{"peer closes", "dead-peer timeout"} {
		t.Run(end, func(t *testing.T) {
			leakcheck.Check(t)
			o := respOpts{ird: 4, ord: 4, accept: iwarp.Params{IRD: 4, ORD: 4},
				pairOpts: conformance.PairOpts{BufSize: 8 << 20, CQE: 64,
					Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}}
			if end == "dead-peer timeout" {
				o.cfg = &iwarp.Config{DeadPeerTimeout: time.Second}
			}
			r := startResponder(t, o)
			s := r.side
			// The initiator's first FPDU lets the responder transmit (MPA);
			// a first Write shows that it does.
			r.raw.write(t, fin(taggedMsg(wire.OpWrite, true, 1, 0, nil), false))
			fillUnique(s.Buf, 1, 0)
			s.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{s.MR.SGE(0, 8)}, RemoteAddr: 0x100000, RKey: 0x5678})
			conformance.ExpectWC(t, conformance.Poll1(t, s.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)

			var ids []uint64
			next := func(i int) verbs.SendWR {
				id := uint64(100 + i)
				ids = append(ids, id)
				switch i % 8 {
				case 3:
					return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
						SGList: []verbs.SGE{s.MR.SGE(7<<20+i%64*4096, 4096)}, RemoteAddr: 0x10000, RKey: 0x1234}
				case 5:
					return s.Send(id, 6<<20, 3000)
				}
				return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{s.MR.SGE(i%6<<20, 1<<20)}, RemoteAddr: 0x100000, RKey: 0x5678}
			}
			posted, longest := fillQueue(t, s.QP, next, func() { ids = ids[:len(ids)-1] })
			t.Logf("%d requests posted before the queue was full; the longest PostSend took %v", posted, longest)
			if !iwarp.TxPartial(s.QP) {
				t.Errorf("the send queue is full but no message is partly written (%s)", iwarp.DebugState(s.QP))
			}
			if st := s.QP.State(); st != verbs.QPSRTS {
				t.Fatalf("QP in %v while the peer merely does not read (connection: %v)", st, r.conn.Err())
			}

			if end == "peer closes" {
				r.raw.nc.Close() // unread data: the kernel resets the connection
			}
			got := map[uint64]verbs.WC{}
			wcs := collect(t, s.SendCQ, ids, got)
			checkFlushedTail(t, wcs, ids)
			conformance.WaitState(t, s.QP, verbs.QPSErr)
			waitDone(t, r.conn)
			if end == "dead-peer timeout" {
				// The raw peer's socket is still open: the kernel aborted the
				// connection. It reports ETIMEDOUT once, to whichever call
				// touches the socket first; the other then sees end-of-file.
				if err := r.conn.Err(); !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, iwarp.ErrDisconnected) {
					t.Errorf("connection error %v, want ETIMEDOUT (TCP_USER_TIMEOUT)", err)
				}
			}
			// A post now fails at once (the QP is in ERR: it completes flushed).
			if _, err := postTimed(t, s.QP, s.Send(1, 0, 8)); err != nil {
				t.Fatalf("PostSend in ERR: %v", err)
			}
			conformance.ExpectWC(t, conformance.Poll1(t, s.SendCQ), 1, verbs.WCWRFlushErr, verbs.WCSend)
		})
	}
}

// expMsg is a message the raw peer expects on the stream.
type expMsg struct {
	op      wire.Opcode // OpWrite, OpSend or OpReadRequest
	data    []byte      // a Write's or Send's payload
	to      uint64      // a Write's target offset
	rr      wire.ReadRequestFields
	msn     uint32
	respond []byte // a Read's response data
}

// streamChecker is a raw peer's reader: it checks every FPDU against the
// messages goverbs was asked to send, in order, and answers Read Requests.
type streamChecker struct {
	mu   sync.Mutex
	exp  []expMsg
	seen int // messages complete
	cond *sync.Cond
	err  error
}

func (c *streamChecker) add(m expMsg) {
	c.mu.Lock()
	c.exp = append(c.exp, m)
	c.mu.Unlock()
}

func (c *streamChecker) drop() {
	c.mu.Lock()
	c.exp = c.exp[:len(c.exp)-1]
	c.mu.Unlock()
}

// run reads the stream until it fails or ends.
func (c *streamChecker) run(p *rawPeer, start <-chan struct{}) {
	<-start
	err := c.read(p)
	c.mu.Lock()
	c.err = err
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *streamChecker) read(p *rawPeer) error {
	br := bufio.NewReaderSize(p.nc, 256<<10)
	var got int // bytes of the current message
	for {
		p.nc.SetReadDeadline(time.Now().Add(guard))
		var pre [wire.MPALenLen]byte
		if _, err := io.ReadFull(br, pre[:]); err != nil {
			return err
		}
		ulen := int(binary.BigEndian.Uint16(pre[:]))
		f := make([]byte, wire.MPALenLen+ulen+wire.TrailerLen(ulen))
		copy(f, pre[:])
		if _, err := io.ReadFull(br, f[wire.MPALenLen:]); err != nil {
			return err
		}
		hl, err := wire.HeaderLen(f[2], f[3])
		if err != nil {
			return err
		}
		h := wire.Header(f[:wire.MPALenLen+ulen])
		pl := f[hl : wire.MPALenLen+ulen]
		c.mu.Lock()
		if c.seen >= len(c.exp) {
			c.mu.Unlock()
			return fmt.Errorf("an FPDU (%v) beyond the %d messages posted", h.Opcode(), c.seen)
		}
		m := c.exp[c.seen]
		c.mu.Unlock()
		if h.Opcode() != m.op {
			return fmt.Errorf("message %d: %v, want %v", c.seen, h.Opcode(), m.op)
		}
		switch m.op {
		case wire.OpWrite:
			if h.STag() != 0x5678 || h.TO() != m.to+uint64(got) {
				return fmt.Errorf("message %d: Write to %#x at %#x, want %#x at %#x", c.seen, h.STag(), h.TO(), 0x5678, m.to+uint64(got))
			}
		case wire.OpSend:
			if h.QN() != wire.QNSend || h.MSN() != m.msn || h.MO() != uint32(got) {
				return fmt.Errorf("message %d: Send QN %d MSN %d MO %d, want 0, %d, %d", c.seen, h.QN(), h.MSN(), h.MO(), m.msn, got)
			}
		case wire.OpReadRequest:
			if rr := h.ReadRequest().Fields(); h.MSN() != m.msn || rr != m.rr {
				return fmt.Errorf("message %d: Read Request MSN %d %+v, want %d %+v", c.seen, h.MSN(), rr, m.msn, m.rr)
			}
			b := make([]byte, wire.TaggedHeaderLen, wire.TaggedHeaderLen+len(m.respond)+wire.MaxTrailerLen)
			wire.PutTagged(b, wire.OpReadResponse, true, m.rr.SinkSTag, m.rr.SinkTO, wire.TaggedDDPLen+len(m.respond))
			p.nc.SetWriteDeadline(time.Now().Add(guard))
			if _, err := p.nc.Write(fin(append(b, m.respond...), false)); err != nil {
				return err
			}
		}
		if !bytes.Equal(pl, m.data[got:min(got+len(pl), len(m.data))]) {
			return fmt.Errorf("message %d (%v): %d bytes at offset %d differ from what was posted", c.seen, m.op, len(pl), got)
		}
		got += len(pl)
		if h.Last() {
			if got != len(m.data) {
				return fmt.Errorf("message %d (%v): %d bytes, want %d", c.seen, m.op, got, len(m.data))
			}
			got = 0
			c.mu.Lock()
			c.seen++
			c.cond.Broadcast()
			c.mu.Unlock()
		}
	}
}

// waitSeen waits until the peer has checked every expected message.
func (c *streamChecker) waitSeen(t *testing.T) {
	t.Helper()
	stop := time.AfterFunc(guard, func() {
		c.mu.Lock()
		if c.err == nil {
			c.err = fmt.Errorf("only %d of %d messages arrived within %v", c.seen, len(c.exp), guard)
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.seen < len(c.exp) && c.err == nil {
		c.cond.Wait()
	}
	if c.seen < len(c.exp) {
		t.Fatalf("raw peer: %v", c.err)
	}
}

// TestPostSendPeerResumes: a raw peer stops reading while goverbs is asked
// for large RDMA Writes, Sends and Reads until its send queue is full
// (every PostSend returning at once); then it reads again. Every request
// completes successfully, and the stream carries every message whole, in
// posting order, with the bytes posted (checked FPDU by FPDU), however
// the socket cut it; the Reads return the peer's data.
func TestPostSendPeerResumes(t *testing.T) {
	leakcheck.Check(t)
	r := startResponder(t, respOpts{ird: 8, ord: 8, accept: iwarp.Params{IRD: 8, ORD: 8},
		pairOpts: conformance.PairOpts{BufSize: 8 << 20, CQE: 256,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 1}}})
	s := r.side
	r.raw.write(t, fin(taggedMsg(wire.OpWrite, true, 1, 0, nil), false))
	fillUnique(s.Buf[:7<<20], 2, 0)

	chk := &streamChecker{}
	chk.cond = sync.NewCond(&chk.mu)
	start := make(chan struct{})
	go chk.run(r.raw, start)
	defer r.raw.nc.Close() // ends the checker (before the leak check)
	// A first Write shows that the responder transmits (MPA's start-up rule).
	chk.add(expMsg{op: wire.OpWrite, data: s.Buf[:8], to: 0x100000})
	s.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.MR.SGE(0, 8)}, RemoteAddr: 0x100000, RKey: 0x5678})
	conformance.ExpectWC(t, conformance.Poll1(t, s.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)

	var ids []uint64
	sendMSN, readMSN, reads := uint32(1), uint32(1), 0
	type readBack struct {
		off  int
		want []byte
	}
	var readsPosted []readBack
	var undo func()
	next := func(i int) verbs.SendWR {
		id := uint64(1000 + i)
		ids = append(ids, id)
		s0, r0, n0, p0 := sendMSN, readMSN, reads, len(readsPosted)
		undo = func() {
			ids = ids[:len(ids)-1]
			chk.drop()
			sendMSN, readMSN, reads, readsPosted = s0, r0, n0, readsPosted[:p0]
		}
		switch i % 6 {
		case 2: // a Send gathered from two SGEs
			a, b := 6<<20+i%16*4096, 6<<20+(i+7)%16*4096+100
			data := append(append([]byte(nil), s.Buf[a:a+1500]...), s.Buf[b:b+2500]...)
			chk.add(expMsg{op: wire.OpSend, data: data, msn: sendMSN})
			sendMSN++
			return verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{s.MR.SGE(a, 1500), s.MR.SGE(b, 2500)}}
		case 4:
			off := 7<<20 + reads%256*4096
			reads++
			resp := make([]byte, 4096)
			fillUnique(resp, 3, uint64(i))
			rr := wire.ReadRequestFields{SinkSTag: s.MR.LKey(), SinkTO: s.MR.RemoteAddr(off), Size: 4096, SrcSTag: 0x9abc, SrcTO: uint64(i) << 12}
			chk.add(expMsg{op: wire.OpReadRequest, rr: rr, msn: readMSN, respond: resp})
			readMSN++
			readsPosted = append(readsPosted, readBack{off, resp})
			return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{s.MR.SGE(off, 4096)}, RemoteAddr: uint64(i) << 12, RKey: 0x9abc}
		}
		src, n := i%6<<20, 1<<20-i*8 // lengths that do not divide evenly into FPDUs
		to := uint64(0x40000000) + uint64(i)<<20
		chk.add(expMsg{op: wire.OpWrite, data: s.Buf[src : src+n], to: to})
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{s.MR.SGE(src, n)}, RemoteAddr: to, RKey: 0x5678}
	}
	unpost := func() { undo() }
	posted, longest := fillQueue(t, s.QP, next, unpost)
	t.Logf("%d requests posted before the queue was full; the longest PostSend took %v; a message partly written: %v",
		posted, longest, iwarp.TxPartial(s.QP))

	close(start) // the peer reads again
	got := map[uint64]verbs.WC{}
	wcs := collect(t, s.SendCQ, ids, got)
	for i, wc := range wcs {
		if wc.WRID != ids[i] || wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %d: %s, want wr_id %d, success (connection: %v; raw peer: %v)", i, conformance.Describe(wc), ids[i], r.conn.Err(), chk.err)
		}
	}
	// More requests, while the stream flows.
	first := len(ids)
	for i := first; i < first+24; i++ {
		if _, err := postTimed(t, s.QP, next(i)); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				unpost()
				collect(t, s.SendCQ, ids, got)
				i--
				continue
			}
			t.Fatalf("PostSend: %v", err)
		}
	}
	collect(t, s.SendCQ, ids, got)
	for _, id := range ids {
		if wc := got[id]; wc.Status != verbs.WCSuccess {
			t.Fatalf("%s, want success", conformance.Describe(wc))
		}
	}
	chk.waitSeen(t)
	for _, rb := range readsPosted {
		if !bytes.Equal(s.Buf[rb.off:rb.off+4096], rb.want) {
			t.Fatalf("the Read into offset %#x did not place the peer's data", rb.off)
		}
	}
	if st := s.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("QP in %v", st)
	}
	t.Logf("%d requests, all on the stream in order", len(ids))
}

// TestPostSendPeerStopped: the peer is a goverbs process stopped with
// SIGSTOP (its kernel takes what fits in its socket, then shuts the
// window). PostSend keeps returning at once until the send queue is full
// (ErrQueueFull). After SIGCONT every request completes successfully, and
// the peer's memory holds what the Writes wrote, in posting order (read
// back with an RDMA Read).
func TestPostSendPeerStopped(t *testing.T) {
	leakcheck.Check(t)
	s := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{
		Cap:     verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1},
		BufSize: 8 << 20, CQE: 256,
	})
	toInit(t, s.QP)
	s.MustPostRecv(t, s.Recv(1000, 0, 64))
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
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
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

	fillUnique(s.Buf[:6<<20], 4, 0)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Writes into the peer's [1 MiB, 2 MiB): whole-MiB ones from changing
	// sources, and 4 KiB ones to changing places; image is what the peer's
	// memory must hold once they are all done in posting order.
	image := make([]byte, 1<<20)
	var ids []uint64
	var undo func()
	next := func(i int) verbs.SendWR {
		id := uint64(1 + i)
		ids = append(ids, id)
		src, n, dst := i%5<<20, 1<<20, 0
		if i%2 == 1 {
			src, n, dst = 5<<20+i%64*4096, 4096, (i*37)%256*4096
		}
		old := append([]byte(nil), image[dst:dst+n]...)
		copy(image[dst:], s.Buf[src:src+n])
		undo = func() { copy(image[dst:], old) }
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{s.MR.SGE(src, n)}, RemoteAddr: raddr + peerWriteOff + uint64(dst), RKey: rkey}
	}
	posted, longest := fillQueue(t, s.QP, next, func() { ids = ids[:len(ids)-1]; undo() })
	t.Logf("peer stopped: %d Writes posted before the queue was full; the longest PostSend took %v; a message partly written: %v",
		posted, longest, iwarp.TxPartial(s.QP))

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]verbs.WC{}
	wcs := collect(t, s.SendCQ, ids, got)
	for i, wc := range wcs {
		if wc.WRID != ids[i] || wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %d: %s, want wr_id %d, success (connection: %v)", i, conformance.Describe(wc), ids[i], conn.Err())
		}
	}
	// Read the peer's memory back.
	clear(s.Buf[7<<20:])
	s.MustPostSend(t, verbs.SendWR{WRID: 9999, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.MR.SGE(7<<20, 1<<20)}, RemoteAddr: raddr + peerWriteOff, RKey: rkey})
	conformance.ExpectWC(t, conformance.Poll1(t, s.SendCQ), 9999, verbs.WCSuccess, verbs.WCRDMARead)
	if b := s.Buf[7<<20:]; !bytes.Equal(b, image) {
		i := 0
		for i < len(b) && b[i] == image[i] {
			i++
		}
		t.Fatalf("the peer's memory differs from the Writes' result from byte %d", i)
	}
}

// TestPartialWritesAllocateNothing: posting and polling allocate nothing
// when messages go out in parts (the socket takes part of each at once, the
// rest is written by the polls or the transmit goroutine), as on the fast
// path.
func TestPartialWritesAllocateNothing(t *testing.T) {
	leakcheck.Check(t)
	r := startResponder(t, respOpts{ird: 4, ord: 4, accept: iwarp.Params{IRD: 4, ORD: 4},
		pairOpts: conformance.PairOpts{BufSize: 4 << 20, CQE: 64}})
	s := r.side
	r.raw.write(t, fin(taggedMsg(wire.OpWrite, true, 1, 0, nil), false))
	// The peer reads everything, into one buffer, until the test ends.
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 64<<10)
		for {
			if _, err := r.raw.nc.Read(buf); err != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	defer func() { close(stop); r.raw.nc.Close(); <-read }()
	r.raw.nc.SetReadDeadline(time.Time{})

	wr := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.MR.SGE(0, 4<<20)}, RemoteAddr: 0x100000, RKey: 0x5678}}
	wcs := make([]verbs.WC, 4)
	partial := 0
	run := func() {
		if err := s.QP.PostSend(wr); err != nil {
			t.Fatalf("PostSend: %v", err)
		}
		if iwarp.TxPartial(s.QP) {
			partial++
		}
		for end := time.Now().Add(guard); ; {
			n, err := s.SendCQ.Poll(wcs)
			if err != nil || n > 0 && wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("Poll: %v %s", err, conformance.Describe(wcs[0]))
			}
			if n > 0 {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("no completion within %v (%s)", guard, iwarp.DebugState(s.QP))
			}
		}
	}
	run() // the first use of the buffers grows them
	if allocs := testing.AllocsPerRun(20, run); allocs != 0 {
		t.Errorf("%v allocations per 4 MiB Write posted and polled", allocs)
	}
	if partial == 0 {
		t.Errorf("no Write was partly written: the test did not test anything")
	}
	t.Logf("%d of 22 Writes partly written at first", partial)
}
