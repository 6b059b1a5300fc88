package iwarp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// TestArrivalBeforeBlock: a message that arrives after the application's
// last progressing poll and before its GetEvent blocks -- in the window of
// the C idiom, whose poll between arming and waiting reads nothing here
// (the Block that follows reads first) -- is received, and its event comes.
// The arrival is reported to the netpoller before the Block begins (the
// test sleeps in between), so the park, which forgets an earlier report,
// would wait for ever if the Block did not read before it parks.
func TestArrivalBeforeBlock(t *testing.T) {
	leakcheck.Check(t)
	x, y, xq, rcq, ch := channelPair(t)
	exercised := 0
	for round := range 20 {
		if err := xq.PostRecv([]verbs.RecvWR{{WRID: uint64(round), SGList: []verbs.SGE{x.MR.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		if n, _ := rcq.Poll(wc[:]); n != 0 { // polled mode: the receive goroutine steps aside
			t.Fatalf("round %d: a completion before the send: %+v", round, wc[0])
		}
		y.MustPostSend(t, y.Send(uint64(round), 0, 8))
		conformance.Poll1(t, y.SendCQ) // written: on loopback, in x's socket
		time.Sleep(200 * time.Microsecond)
		if err := rcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		full, empty := iwarp.Reads(xq)
		n, _ := rcq.Poll(wc[:])
		full2, empty2 := iwarp.Reads(xq)
		// Polled mode still on: the idle rule did not hand the socket back
		// to the receive goroutine (a test stalled for milliseconds).
		if iwarp.Polled(xq) {
			exercised++
			if n != 0 || full2 != full || empty2 != empty {
				t.Fatalf("round %d: the poll after arming read the socket: %d completions, reads %d/%d -> %d/%d",
					round, n, full, empty, full2, empty2)
			}
		}
		if n == 0 {
			awaitEvent(t, round, xq, rcq, ch, &wc)
		}
		if wc[0].Status != verbs.WCSuccess || wc[0].WRID != uint64(round) {
			t.Fatalf("round %d: %+v", round, wc[0])
		}
	}
	if exercised == 0 {
		t.Fatal("polled mode never lasted through a round: the window was not tested")
	}
}

// TestBlockReadsPastFullRead: a blocked waiter whose read fills its staging
// buffer reads again before it parks, even when what it read made no
// completion it waits for (RDMA WRITEs): a full read does not show that the
// socket is empty, and the bytes that arrived with the ones read signal
// nothing more. Many small WRITEs and then a SEND are in the socket, and
// reported to the netpoller, before the waiter blocks. Every FPDU is 64
// bytes (a WRITE of 44, a SEND of 40), so that reads which fill the
// buffer end at an FPDU's end.
func TestBlockReadsPastFullRead(t *testing.T) {
	leakcheck.Check(t)
	x, y, xq, rcq, ch := channelPairCap(t, verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	const writes = 300 // 19 KiB of FPDUs: four staging buffers and more
	exercised := 0
	for round := range 10 {
		if err := xq.PostRecv([]verbs.RecvWR{{WRID: uint64(round), SGList: []verbs.SGE{x.MR.SGE(3072, 64)}}}); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		if n, _ := rcq.Poll(wc[:]); n != 0 { // polled mode: the receive goroutine steps aside
			t.Fatalf("round %d: a completion before the send: %+v", round, wc[0])
		}
		if err := rcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		wrs := make([]verbs.SendWR, 0, writes+1)
		for i := range writes {
			wrs = append(wrs, verbs.SendWR{WRID: 1000 + uint64(i), Opcode: verbs.WRRDMAWrite,
				SGList: []verbs.SGE{y.MR.SGE(i%64*44, 44)}, RemoteAddr: x.MR.RemoteAddr(i % 64 * 44), RKey: x.MR.RKey()})
		}
		wrs = append(wrs, y.Send(uint64(round), 0, 40))
		y.MustPostSend(t, wrs...)
		conformance.ExpectWC(t, conformance.Poll1(t, y.SendCQ), uint64(round), verbs.WCSuccess, verbs.WCSend)
		time.Sleep(200 * time.Microsecond)
		full, _ := iwarp.Reads(xq)
		n, _ := rcq.Poll(wc[:]) // the idiom's poll after arming: it reads nothing
		if full2, _ := iwarp.Reads(xq); iwarp.Polled(xq) && full2 == full && n == 0 {
			exercised++ // the socket holds it all: the Block reads it
		}
		if n == 0 {
			n = awaitEvent(t, round, xq, rcq, ch, &wc)
		}
		if n != 1 || wc[0].Status != verbs.WCSuccess || wc[0].WRID != uint64(round) {
			t.Fatalf("round %d: %d completions %+v", round, n, wc[0])
		}
	}
	if exercised == 0 {
		t.Fatal("polled mode never lasted through a round: the full read was not tested")
	}
}

// awaitEvent takes the completion of an armed CQ the verbs way: an event
// may be left from a completion polled before (one that came between
// ReqNotify and Poll), so after each event the CQ is polled, and re-armed
// and polled again if that found nothing.
func awaitEvent(t *testing.T, round int, xq *verbs.QP, rcq *verbs.CQ, ch *verbs.CompChannel, wc *[1]verbs.WC) int {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := ch.GetEvent(c)
		if err != nil {
			t.Fatalf("round %d: no completion event: %v (x %s)", round, err, iwarp.DebugState(xq))
		}
		ch.AckEvents(ev, 1)
		if n, _ := rcq.Poll(wc[:]); n != 0 {
			return n
		}
		if err := rcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if n, _ := rcq.Poll(wc[:]); n != 0 {
			return n
		}
	}
}

// TestBlockSeesEndWithData: a blocked waiter that reads a message making no
// completion it waits for (an RDMA WRITE) and, with it, the end of the
// stream reads on and meets the end: the connection fails and the posted
// receive completes (flushed), where a park would have waited for ever --
// the netpoller reported the end with the message, before the Block
// began, and reports nothing more.
func TestBlockSeesEndWithData(t *testing.T) {
	leakcheck.Check(t)
	exercised := 0
	for round := range 3 {
		r := startResponder(t, respOpts{ird: 4, ord: 4, accept: iwarp.Params{IRD: 4, ORD: 4}})
		s := r.side
		s.RecvCQ.SetWaitSpin(0)
		s.MustPostRecv(t, s.Recv(7, 0, 64))
		var wc [1]verbs.WC
		if n, _ := s.RecvCQ.Poll(wc[:]); n != 0 { // polled mode: the receive goroutine steps aside
			t.Fatalf("round %d: a completion before anything was sent: %+v", round, wc[0])
		}
		write := fin(taggedMsg(wire.OpWrite, true, fuzzSTag, fuzzTO(512), payload(200)), r.raw.crc)
		if _, err := r.raw.nc.Write(fuzzPatch(write, s.MR, r.raw.crc)); err != nil {
			t.Fatal(err)
		}
		r.raw.nc.CloseWrite()
		time.Sleep(200 * time.Microsecond) // the netpoller takes the report of both
		if iwarp.Polled(s.QP) {
			exercised++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.RecvCQ.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: the wait did not end: %v (%s)", round, err, iwarp.DebugState(s.QP))
		}
		if n, _ := s.RecvCQ.Poll(wc[:]); n != 1 || wc[0].WRID != 7 || wc[0].Status != verbs.WCWRFlushErr {
			t.Fatalf("round %d: %d completions %+v, want the receive flushed", round, n, wc[0])
		}
		if got := s.Buf[512:712]; !bytes.Equal(got, payload(200)) {
			t.Fatalf("round %d: the WRITE was not placed", round)
		}
		r.raw.nc.Close()
		waitDone(t, r.conn)
	}
	if exercised == 0 {
		t.Fatal("polled mode never lasted through a round: the end with data was not tested")
	}
}
