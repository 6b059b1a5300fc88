package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/faults"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/rdmacmtest"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// waitDisconnected waits (10 s at most) for id's peer to disconnect.
func waitDisconnected(t *testing.T, id *rdmacm.ID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		e, err := id.NextEvent(ctx)
		if err != nil {
			t.Fatalf("the peer saw no disconnect: %v", err)
		}
		if e.Type == rdmacm.EventDisconnected {
			return
		}
	}
}

func inject(t *testing.T, p faults.Plan) *faults.Injector {
	t.Helper()
	in, err := faults.Inject(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Stop() })
	return in
}

// A failed request completes with the injected status in its place: the
// requests before it succeed, the ones after it are flushed, and the QP
// is in ERR.
func TestFailCompletesWithStatusThenFlushes(t *testing.T) {
	for _, tr := range rdmacmtest.Transports {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := rdmacmtest.Connect(t, tr, 1)
			in := inject(t, faults.Plan{Rules: []faults.Rule{{Action: faults.Fail, Status: verbs.WCRetryExcErr,
				Device: a.Ctx.Device().Name(), QPNum: a.QP.Num(), Opcodes: []verbs.WROpcode{verbs.WRRDMAWrite}, Nth: 3}}})
			for i := range 5 {
				if err := a.QP.PostSend([]verbs.SendWR{a.Write(uint64(i+1), b, i*8)}); err != nil {
					t.Fatal(err)
				}
			}
			want := []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess, verbs.WCRetryExcErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr}
			for i, wc := range conformance.PollN(t, a.SCQ, 5) {
				if wc.WRID != uint64(i+1) || wc.Status != want[i] {
					t.Fatalf("completion %d: %s, want wr_id %d %v", i, conformance.Describe(wc), i+1, want[i].Name())
				}
			}
			conformance.WaitState(t, a.QP, verbs.QPSErr)
			f := in.Fired()
			if len(f) != 1 || f[0].Action != faults.Fail || f[0].Seq != 3 || f[0].WRID != 3 || f[0].Status != verbs.WCRetryExcErr {
				t.Fatalf("fired %v, want one fail of request 3", f)
			}
		})
	}
}

// A killed QP raises EventQPFatal, flushes the request and everything
// after it, and (over a connection) the peer sees the connection end.
func TestKillQP(t *testing.T) {
	for _, tr := range rdmacmtest.Transports {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := rdmacmtest.Connect(t, tr, 1)
			inject(t, faults.Plan{Rules: []faults.Rule{{Action: faults.KillQP, QPNum: a.QP.Num(), Device: a.Ctx.Device().Name(), Nth: 2}}})
			for i := range 3 {
				if err := a.QP.PostSend([]verbs.SendWR{a.Write(uint64(i+1), b, i*8)}); err != nil && !errors.Is(err, verbs.ErrInvalidState) {
					t.Fatal(err)
				}
			}
			wcs := conformance.PollN(t, a.SCQ, 3)
			// The first request completed, or (over RoCE, where it waits
			// for its ACK) it was still outstanding and is flushed too.
			if wc := wcs[0]; wc.WRID != 1 || wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
				t.Fatalf("completion %s, want wr_id 1 done or flushed", conformance.Describe(wc))
			}
			for i, wc := range wcs[1:] {
				if wc.WRID != uint64(i+2) || wc.Status != verbs.WCWRFlushErr {
					t.Fatalf("completion %s, want wr_id %d flushed", conformance.Describe(wc), i+2)
				}
			}
			// The context is rdmacm's, shared with earlier tests: their
			// QPs' events may come first.
			for {
				ev := conformance.NextEvent(t, a.Ctx)
				if ev.QP != a.QP {
					continue
				}
				if ev.Type != verbs.EventQPFatal {
					t.Fatalf("async event %v, want QP_FATAL of the QP", ev.Type)
				}
				break
			}

			// What the peer sees is its transport's: over iWARP the stream
			// closes (a disconnect); over the IB transports nothing is
			// said, and its next request fails.
			if tr == "iwarp" {
				waitDisconnected(t, b.ID)
			}
			if err := b.QP.PostSend([]verbs.SendWR{b.Write(9, a, 512)}); err == nil {
				if wc := conformance.Poll1(t, b.SCQ); wc.Status == verbs.WCSuccess {
					t.Fatalf("the peer's write to a dead QP: %s", conformance.Describe(wc))
				}
			} else if !errors.Is(err, verbs.ErrInvalidState) {
				t.Fatal(err)
			}
		})
	}
}

// A delayed request holds back those posted after it: they complete
// later, all of them, in order.
func TestDelayKeepsOrder(t *testing.T) {
	for _, tr := range rdmacmtest.Transports {
		t.Run(tr, func(t *testing.T) {
			a, b := rdmacmtest.Connect(t, tr, 1)
			inject(t, faults.Plan{Rules: []faults.Rule{{Action: faults.Delay, Delay: time.Second, QPNum: a.QP.Num(), Device: a.Ctx.Device().Name(), Nth: 1}}})
			for i := range 3 {
				if err := a.QP.PostSend([]verbs.SendWR{a.Write(uint64(i+1), b, i*8)}); err != nil {
					t.Fatal(err)
				}
			}
			var wc [1]verbs.WC
			if n, _ := a.SCQ.Poll(wc[:]); n != 0 {
				t.Fatalf("a completion at once (%s) although the first request is held back for 1 s", conformance.Describe(wc[0]))
			}
			for i, wc := range conformance.PollN(t, a.SCQ, 3) {
				conformance.ExpectWC(t, wc, uint64(i+1), verbs.WCSuccess, verbs.WCRDMAWrite)
			}
		})
	}
}

// A refused connection request reaches the dialer as a rejection; the
// next one is accepted.
func TestRefuseConnect(t *testing.T) {
	in := inject(t, faults.Plan{Rules: []faults.Rule{{Action: faults.RefuseConnect, Nth: 1}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.GetRequest(ctx); err == nil {
			req.CreateQP(nil, verbs.QPInitAttr{Cap: rdmacmtest.Cap})
			req.Accept(ctx, nil)
			defer req.Close()
			<-ctx.Done()
		}
	}()
	if _, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), nil, nil); !errors.Is(err, rdmacm.ErrRejected) {
		t.Fatalf("first Dial: %v, want a rejection", err)
	}
	c, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), nil, nil)
	if err != nil {
		t.Fatalf("second Dial: %v", err)
	}
	c.Close()
	if f := in.Fired(); len(f) != 1 || f[0].Action != faults.RefuseConnect || f[0].Seq != 1 {
		t.Fatalf("fired %v", f)
	}
}

// Datagrams dropped, duplicated and reordered on a RoCE wire: every
// message still arrives once and in order.
func TestWireFaultsRoCE(t *testing.T) {
	a, b := rdmacmtest.Connect(t, "roce", 7)
	in := inject(t, faults.Plan{Seed: 3, Rules: []faults.Rule{{Action: faults.WireDrop, Fraction: 0.05},
		{Action: faults.WireDup, Fraction: 0.03}, {Action: faults.WireReorder, Fraction: 0.03}}})
	const n = 200
	for i := 0; i < n; i += 8 {
		for j := range 8 {
			if err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i + j), SGList: []verbs.SGE{b.MR.SGE(j*8, 8)}}}); err != nil {
				t.Fatal(err)
			}
			a.Buf[1024+j*8] = byte(i + j)
			if err := a.QP.PostSend([]verbs.SendWR{{WRID: uint64(i + j), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(1024+j*8, 8)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for j, wc := range conformance.PollN(t, b.RCQ, 8) {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+j) || b.Buf[j*8] != byte(i+j) {
				t.Fatalf("message %d: %s, byte %d", i+j, conformance.Describe(wc), b.Buf[j*8])
			}
		}
		for _, wc := range conformance.PollN(t, a.SCQ, 8) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("send: %s", conformance.Describe(wc))
			}
		}
	}
	if len(in.Fired()) == 0 {
		t.Fatal("no datagram was hit")
	}
}

func TestParse(t *testing.T) {
	p, err := faults.Parse("seed=7;fail:status=RETRY_EXC_ERR,op=RDMA_WRITE|send,p=0.01;kill:nth=1000,limit=1;delay:d=5ms,p=0.5;refuse:nth=1;drop:p=0.1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Seed != 7 || len(p.Rules) != 5 {
		t.Fatalf("plan %+v", p)
	}
	r := p.Rules[0]
	if r.Action != faults.Fail || r.Status != verbs.WCRetryExcErr || len(r.Opcodes) != 2 || r.Opcodes[1] != verbs.WRSend || r.Fraction != 0.01 {
		t.Fatalf("rule 0 %+v", r)
	}
	if p.Rules[1].Nth != 1000 || p.Rules[1].Limit != 1 || p.Rules[2].Delay != 5*time.Millisecond {
		t.Fatalf("rules %+v", p.Rules)
	}
	if r, err := faults.Parse("failrecv:status=LOC_LEN_ERR,qp=5,nth=2"); err != nil || len(r.Rules) != 1 ||
		r.Rules[0].Action != faults.FailRecv || r.Rules[0].Status != verbs.WCLocLenErr || r.Rules[0].QPNum != 5 || r.Rules[0].Nth != 2 {
		t.Fatalf("failrecv: %+v, %v", r, err)
	}
	for _, bad := range []string{"explode:nth=1", "fail:nth=1", "failrecv:status=REM_OP_ERR,nth=1", "failrecv:status=LOC_LEN_ERR,op=SEND,nth=1", "fail:status=WR_FLUSH_ERR,nth=1", "fail:status=NOPE,nth=1",
		"delay:nth=1", "kill:p=2", "kill:", "kill:nth=1,op=TELEPORT", "kill:nth=x", "seed=x;kill:nth=1", "kill:nth=1,colour=red"} {
		if _, err := faults.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

// The same seed gives the same faults on the same requests, run after
// run; another seed, others. Each run is a process of its own (the plan
// comes from GOVERBS_FAULTS), as a failing test would be run again.
func TestSameSeedSameRun(t *testing.T) {
	if os.Getenv("GOVERBS_FAULTS_CHILD") != "" {
		child(t)
		return
	}
	run := func(seed int) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSameSeedSameRun$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GOVERBS_FAULTS_CHILD=1",
			fmt.Sprintf("%s=seed=%d;fail:status=REM_ACCESS_ERR,p=0.1;delay:d=1ms,p=0.1", faults.Env, seed))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var fired []string
		for _, l := range strings.Split(string(out), "\n") {
			if s, ok := strings.CutPrefix(l, "FIRED "); ok {
				fired = append(fired, s)
			}
		}
		if len(fired) == 0 {
			t.Fatalf("no fault fired:\n%s", out)
		}
		return strings.Join(fired, "\n")
	}
	one, two, other := run(11), run(11), run(12)
	if one != two {
		t.Fatalf("seed 11 gave two runs:\n%s\n--\n%s", one, two)
	}
	if one == other {
		t.Fatalf("seeds 11 and 12 gave the same run:\n%s", one)
	}
}

// child runs traffic over loop and shm QPs, reconnecting after each
// failure, and prints what fired.
func child(t *testing.T) {
	in := faults.FromEnv
	if in == nil {
		t.Fatal("GOVERBS_FAULTS did not turn a plan on")
	}
	defer in.Stop()
	for _, tr := range []string{"loop", "shm"} {
		for range 4 {
			a, b := rdmacmtest.Connect(t, tr, 1)
			for i := range 16 {
				if err := a.QP.PostSend([]verbs.SendWR{a.Write(uint64(i+1), b, i*8)}); err != nil {
					break
				}
				if wc := conformance.Poll1(t, a.SCQ); wc.Status != verbs.WCSuccess {
					break
				}
			}
		}
	}
	for _, f := range in.Fired() {
		fmt.Printf("FIRED %s\n", f)
	}
}

// A disconnect fault ends the connection as rdma_disconnect would look to
// the QP: ERR, the request and what follows flushed, no fatal event; over
// iWARP the peer sees the connection end.
func TestDisconnect(t *testing.T) {
	leakcheck.Check(t)
	a, b := rdmacmtest.Connect(t, "iwarp", 1)
	inject(t, faults.Plan{Rules: []faults.Rule{{Action: faults.Disconnect, QPNum: a.QP.Num(), Device: a.Ctx.Device().Name(), Nth: 1}}})
	if err := a.QP.PostSend([]verbs.SendWR{a.Write(1, b, 0)}); err != nil {
		t.Fatal(err)
	}
	if wc := conformance.Poll1(t, a.SCQ); wc.WRID != 1 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("completion %s, want wr_id 1 flushed", conformance.Describe(wc))
	}
	conformance.WaitState(t, a.QP, verbs.QPSErr)
	waitDisconnected(t, b.ID)
	// No fatal event for the QP: the context's next event, if any, is not one.
	c, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	for {
		ev, err := a.Ctx.GetAsyncEvent(c)
		if err != nil {
			break
		}
		if ev.QP == a.QP && ev.Type == verbs.EventQPFatal {
			t.Fatal("a disconnect raised QP_FATAL")
		}
	}
}

// A failed receive (FailRecv) has exactly the consequences of a real one on
// every provider: the same statuses on both sides as a receive whose
// buffer is too small (LOC_LEN_ERR) or not writable (LOC_PROT_ERR), the
// receiving QP in ERR with its later receives flushed, and the sender's
// QP failing too.
func TestFailRecvIsARealReceiveError(t *testing.T) {
	type result struct{ send, recv []verbs.WCStatus }
	run := func(t *testing.T, tr string, st verbs.WCStatus, inj bool) result {
		a, b := rdmacmtest.Connect(t, tr, 1)
		recvBuf := make([]byte, 3*256)
		access := verbs.AccessLocalWrite
		if !inj && st == verbs.WCLocProtErr {
			access = verbs.AccessRemoteRead // no local write: a receive cannot land there
		}
		bad, err := b.QP.PD().RegMR(recvBuf, access|verbs.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Dereg()
		good, err := b.QP.PD().RegMR(make([]byte, 3*256), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer good.Dereg()
		second := bad.SGE(256, 256)
		if !inj && st == verbs.WCLocLenErr {
			second = good.SGE(256, 8) // too small for the 64-byte SEND
		}
		if inj {
			second = good.SGE(256, 256)
			inject(t, faults.Plan{Rules: []faults.Rule{{Action: faults.FailRecv, Status: st,
				Device: b.Ctx.Device().Name(), QPNum: b.QP.Num(), Nth: 2}}})
		}
		for i, sge := range []verbs.SGE{good.SGE(0, 256), second, good.SGE(512, 256)} {
			if err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i + 1), SGList: []verbs.SGE{sge}}}); err != nil {
				t.Fatal(err)
			}
		}
		var r result
		for i := range 2 {
			wr := verbs.SendWR{WRID: uint64(i + 1), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)}}
			if err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			r.send = append(r.send, conformance.Poll1(t, a.SCQ).Status)
		}
		for i, wc := range conformance.PollN(t, b.RCQ, 3) {
			if wc.WRID != uint64(i+1) {
				t.Fatalf("receive completion %d: %s", i, conformance.Describe(wc))
			}
			r.recv = append(r.recv, wc.Status)
		}
		conformance.WaitState(t, b.QP, verbs.QPSErr)
		// The sender's QP fails too: at once over IB transports (the
		// NAK), once the Terminate arrives over iWARP.
		conformance.WaitState(t, a.QP, verbs.QPSErr)
		return r
	}
	for _, tr := range rdmacmtest.Transports {
		for _, st := range []verbs.WCStatus{verbs.WCLocLenErr, verbs.WCLocProtErr} {
			t.Run(tr+"/"+st.Name(), func(t *testing.T) {
				leakcheck.Check(t)
				real := run(t, tr, st, false)
				injected := run(t, tr, st, true)
				if want := []verbs.WCStatus{verbs.WCSuccess, st, verbs.WCWRFlushErr}; !slices.Equal(injected.recv, want) {
					t.Errorf("receives completed %v, want %v", injected.recv, want)
				}
				if !slices.Equal(injected.recv, real.recv) || !slices.Equal(injected.send, real.send) {
					t.Errorf("injected: sends %v, receives %v; a real %v: sends %v, receives %v",
						injected.send, injected.recv, st.Name(), real.send, real.recv)
				}
				t.Logf("sends %v, receives %v", injected.send, injected.recv)
			})
		}
	}
}
