package roce_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// pairAt connects two RC QPs on the two test devices whose PSNs start at
// psn, with the given ACK timeout (4.096 µs × 2^timeout) and retry count.
func pairAt(t *testing.T, psn uint32, bufSize int, timeout, retry uint8) (x, y *conformance.Side) {
	t.Helper()
	o := conformance.PairOpts{BufSize: bufSize, CQE: 1024, NoConnect: true,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}}
	ca, cb := fixture{}.Open(t)
	x = conformance.NewSide(t, ca, verbs.QPTRC, o)
	y = conformance.NewSide(t, cb, verbs.QPTRC, o)
	for _, s := range [][2]*conformance.Side{{x, y}, {y, x}} {
		q, dest := s[0].QP, s[1].QP
		gid, err := dest.PD().Context().QueryGID(1, 0)
		if err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: dest.Num(), RQPSN: psn, MaxDestRdAtomic: 16, MinRNRTimer: 1,
				AHAttr: verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		}
		for _, st := range steps {
			if err := q.Modify(&st.a, st.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []*verbs.QP{x.QP, y.QP} {
		a := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: psn, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 16}
		if err := q.Modify(&a, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
	return x, y
}

// pattern fills b with bytes that depend on seq.
func pattern(b []byte, seq int) {
	for i := range b {
		b[i] = byte(seq*7 + i*13 + i>>8)
	}
}

const slot = 16 << 10 // a receive buffer; SENDs are at most this long

// traffic runs SENDs of many sizes (each packet count from 1 to 16, at
// MTU 1024), RDMA WRITEs and READs from x to y, and checks that every
// message arrives once, whole and in order, and every completion comes.
func traffic(t *testing.T, x, y *conformance.Side, msgs int) {
	t.Helper()
	sizes := []int{1, 100, 1024, 1025, 4000, 9000, slot}
	const recvSlots = 64
	// y: receive slots at [0, 64*slot); x: send source at [0, slot), a
	// WRITE source at [slot, 2*slot), READ sink at [2*slot, 3*slot).
	post := func(i int) {
		err := y.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{y.MR.SGE((i%recvSlots)*slot, slot)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range recvSlots {
		post(i)
	}
	wc := make([]verbs.WC, 64)
	deadline := time.Now().Add(60 * time.Second)
	sent, recvd, done := 0, 0, 0
	out := 0
	for recvd < msgs || done < msgs {
		if time.Now().After(deadline) {
			t.Fatalf("stuck: %d sent, %d received, %d send completions", sent, recvd, done)
		}
		if sent < msgs && out < 8 && sent-recvd < recvSlots {
			n := sizes[sent%len(sizes)]
			pattern(x.Buf[:n], sent)
			// The source is reused only after its SEND completed.
			if err := x.QP.PostSend([]verbs.SendWR{{WRID: uint64(sent), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{x.MR.SGE(0, n)}}}); err != nil {
				t.Fatal(err)
			}
			sent++
			out++
			// Wait for it before reusing x.Buf (one message in flight
			// keeps the pattern check simple; the window still holds many
			// packets of it).
			if err := conformance.Spin(x.SendCQ, wc); err != nil {
				t.Fatalf("SEND %d: %v", sent-1, err)
			}
			out--
			done++
		}
		n, err := y.RecvCQ.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wc[:n] {
			if err := w.Err(); err != nil {
				t.Fatalf("receive %d: %v", recvd, err)
			}
			if int(w.WRID) != recvd {
				t.Fatalf("receive completion %d for message %d: out of order", w.WRID, recvd)
			}
			size := sizes[recvd%len(sizes)]
			if int(w.ByteLen) != size {
				t.Fatalf("message %d: %d bytes, want %d", recvd, w.ByteLen, size)
			}
			want := make([]byte, size)
			pattern(want, recvd)
			got := y.Buf[(recvd%recvSlots)*slot:][:size]
			if !bytes.Equal(got, want) {
				t.Fatalf("message %d: wrong bytes", recvd)
			}
			recvd++
			if recvd+recvSlots-1 < msgs {
				post(recvd + recvSlots - 1)
			}
		}
	}
	// WRITE a region, READ it back.
	src, sink := x.Buf[slot:2*slot], x.Buf[2*slot:3*slot]
	pattern(src, 12345)
	remote := y.MR.RemoteAddr(recvSlots * slot)
	if err := x.QP.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(slot, slot)}, RemoteAddr: remote, RKey: y.MR.RKey()},
		{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(2*slot, slot)}, RemoteAddr: remote, RKey: y.MR.RKey()},
	}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if err := conformance.Spin(x.SendCQ, wc); err != nil {
			t.Fatalf("WRITE/READ: %v", err)
		}
		if int(wc[0].WRID) != i {
			t.Fatalf("completion %d, want %d", wc[0].WRID, i)
		}
	}
	if !bytes.Equal(src, sink) {
		t.Fatal("READ did not return what the WRITE wrote")
	}
	// Exactly once: no receive beyond the messages sent.
	time.Sleep(20 * time.Millisecond)
	if n, _ := y.RecvCQ.Poll(wc); n != 0 {
		t.Fatalf("%d receive completions more than the messages sent", n)
	}
}

// faultsAt makes a seeded wire that drops, duplicates and holds back
// (reorders) the given per-mille fractions of datagrams.
func faultsAt(seed uint64, drop, dup, hold int) func() {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return roce.SetWireFaults(func([]byte) roce.FaultKind {
		mu.Lock()
		v := r.IntN(1000)
		mu.Unlock()
		switch {
		case v < drop:
			return roce.FaultDrop
		case v < drop+dup:
			return roce.FaultDup
		case v < drop+dup+hold:
			return roce.FaultHold
		}
		return roce.FaultPass
	})
}

// lossyTimeout is the ACK timeout of the lossy tests: 134 ms, so that
// eight timeouts in a row without progress (RETRY_EXC_ERR) take a second,
// a stall that a loaded machine running -race does not reach (at 4 ms it
// did, and once at 67 ms with every package's tests and two other jobs
// running); most losses are recovered by sequence NAKs, without waiting.
const lossyTimeout = 15

// A lossy wire (1 to 10% of datagrams dropped, some duplicated and
// reordered, both ways): every message arrives exactly once, whole and in
// order, every completion comes (go-back-N, duplicate detection, READs
// asked again).
func TestLossyLink(t *testing.T) {
	leakcheck.Check(t)
	for _, c := range []struct{ drop, dup, hold int }{{10, 10, 10}, {50, 20, 50}, {100, 30, 100}} {
		t.Run(fmt.Sprintf("drop=%d‰,dup=%d‰,reorder=%d‰", c.drop, c.dup, c.hold), func(t *testing.T) {
			x, y := pairAt(t, 0, 80*slot, lossyTimeout, 7)
			defer faultsAt(uint64(c.drop), c.drop, c.dup, c.hold)()
			traffic(t, x, y, 150)
		})
	}
}

// PSNs wrap at 2^24: a connection that starts just below the wrap carries
// multi-packet messages across it.
func TestPSNWrap(t *testing.T) {
	leakcheck.Check(t)
	x, y := pairAt(t, 0xFFFFFF-20, 80*slot, lossyTimeout, 7)
	traffic(t, x, y, 30)
	// And across the wrap with losses.
	defer faultsAt(7, 50, 10, 50)()
	x, y = pairAt(t, 0xFFFFF0, 80*slot, lossyTimeout, 7)
	traffic(t, x, y, 40)
}

// A peer that stops answering: the requester retries retry_cnt times
// after each ACK timeout and then completes the request with
// RETRY_EXC_ERR, flushes what follows, and the QP goes to ERROR, within
// the bound the attributes give.
func TestPeerStopsAnswering(t *testing.T) {
	leakcheck.Check(t)
	x, _ := pairAt(t, 0, 4*slot, 10, 3) // 4 ms
	defer roce.SetWireFaults(func([]byte) roce.FaultKind { return roce.FaultDrop })()
	start := time.Now()
	if err := x.QP.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 3000)}, RemoteAddr: 0, RKey: 1},
		{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 8)}},
		{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, 8)}, RemoteAddr: 0, RKey: 1},
	}); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	want := []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr}
	for i, st := range want {
		err := conformance.Spin(x.SendCQ, wc)
		var we *verbs.WCError
		if wc[0].Status != st || int(wc[0].WRID) != i+1 || !errors.As(err, &we) {
			t.Fatalf("completion %d: WR %d %v, want WR %d %v", i, wc[0].WRID, wc[0].Status, i+1, st)
		}
	}
	// 4 tries of about 4.2 ms each (timeout 10): a guard against waiting
	// for ever, hundreds of times the bound.
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("RETRY_EXC_ERR after %v", el)
	}
	conformance.WaitState(t, x.QP, verbs.QPSErr)
}
