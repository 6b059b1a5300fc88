package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// atSendDev is a loop device that completes at send, as iWARP does.
var atSendDev = loop.AddDeviceConfig("loop-atsend", loop.Config{CompleteAtSend: true})

// side is one end of a connected pair: its QP, CQ (send and receive
// alike) and a region with every remote right.
type side struct {
	ctx *verbs.Context
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func connected(t *testing.T, dev string, rnrRetry uint8) (a, b side) {
	t.Helper()
	ctx, err := verbs.OpenDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mk := func() side {
		cq, err := ctx.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		return side{ctx, cq, qp, mr}
	}
	a, b = mk(), mk()
	attr := loop.DefaultRC
	attr.RNRRetry = rnrRetry
	if err := loop.ConnectAttr(a.qp, b.qp, attr); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// poll returns n completions of cq (they are there when PostSend returns:
// loop works synchronously).
func poll(t *testing.T, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, n+1)
	got, err := cq.Poll(wc)
	if err != nil || got != n {
		t.Fatalf("polled %d completions (%v), want %d: %+v", got, err, n, wc[:got])
	}
	return wc[:n]
}

// events returns n asynchronous events of ctx, by QP (both sides share
// the context).
func events(t *testing.T, ctx *verbs.Context, n int) map[*verbs.QP]verbs.EventType {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := map[*verbs.QP]verbs.EventType{}
	for range n {
		ev, err := ctx.GetAsyncEvent(c)
		if err != nil {
			t.Fatalf("after %v: %v", m, err)
		}
		m[ev.QP] = ev.Type
	}
	return m
}

// A remote error of a SEND or RDMA WRITE: on loop0, in the failing
// request's completion (InfiniBand); with CompleteAtSend, the request
// completes successfully and the error follows as iWARP's does: the QP in
// ERR, EventQPFatal, and the next request flushed. An RDMA READ reports
// its error in its completion either way.
func TestCompleteAtSend(t *testing.T) {
	cases := []struct {
		name string
		// post posts the failing request (wr_id 1), signaled, with a's
		// region and b's.
		post   func(a, b side) verbs.SendWR
		recv   bool           // b posts a 16-byte receive first
		ib     verbs.WCStatus // the request's status on loop0
		iwarp  verbs.WCStatus // and with CompleteAtSend
		bRecv  verbs.WCStatus // b's receive completion, when recv
		bEvent verbs.EventType
	}{
		{name: "WRITE with a bad rkey",
			post: func(a, b side) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1}
			},
			ib: verbs.WCRemAccessErr, iwarp: verbs.WCSuccess, bEvent: verbs.EventQPAccessErr},
		{name: "WRITE past the region",
			post: func(a, b side) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() + 4090, RKey: b.mr.RKey()}
			},
			ib: verbs.WCRemAccessErr, iwarp: verbs.WCSuccess, bEvent: verbs.EventQPAccessErr},
		{name: "SEND longer than the receive", recv: true,
			post: func(a, b side) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 64)}}
			},
			ib: verbs.WCRemInvReqErr, iwarp: verbs.WCSuccess, bRecv: verbs.WCLocLenErr},
		{name: "SEND with no receive posted",
			post: func(a, b side) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
			},
			ib: verbs.WCRNRRetryExcErr, iwarp: verbs.WCSuccess},
		{name: "READ with a bad rkey",
			post: func(a, b side) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1}
			},
			ib: verbs.WCRemAccessErr, iwarp: verbs.WCRemAccessErr, bEvent: verbs.EventQPAccessErr},
	}
	for _, c := range cases {
		for _, dev := range []string{loop.DeviceName, atSendDev} {
			t.Run(c.name+"/"+dev, func(t *testing.T) {
				a, b := connected(t, dev, 0) // rnr_retry 0: an RNR fails at once on loop0
				if c.recv {
					if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: []verbs.SGE{b.mr.SGE(0, 16)}}}); err != nil {
						t.Fatal(err)
					}
				}
				wr := c.post(a, b)
				wr.WRID, wr.Flags = 1, verbs.SendSignaled
				next := verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if err := a.qp.PostSend([]verbs.SendWR{wr, next}); err != nil {
					t.Fatal(err)
				}
				want := c.ib
				if dev == atSendDev {
					want = c.iwarp
				}
				wcs := poll(t, a.cq, 2)
				if wcs[0].WRID != 1 || wcs[0].Status != want || wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
					t.Errorf("completions %v (wr_id %d), %v (wr_id %d); want %v, then WR_FLUSH_ERR",
						wcs[0].Status, wcs[0].WRID, wcs[1].Status, wcs[1].WRID, want)
				}
				if a.qp.State() != verbs.QPSErr {
					t.Errorf("requester QP in %v, want ERR", a.qp.State())
				}
				// The requester hears of an error that was not in its
				// completion by the QP's fatal event.
				nev := 0
				if want == verbs.WCSuccess {
					nev++
				}
				if c.bEvent != 0 {
					nev++
				}
				evs := events(t, a.ctx, nev)
				if want == verbs.WCSuccess && evs[a.qp] != verbs.EventQPFatal {
					t.Errorf("requester's event %v, want QP_FATAL", evs[a.qp])
				}
				if c.bEvent != 0 && evs[b.qp] != c.bEvent {
					t.Errorf("target's event %v, want %v", evs[b.qp], c.bEvent)
				}
				if c.recv {
					if wc := poll(t, b.cq, 1); wc[0].Status != c.bRecv {
						t.Errorf("target's receive: %v, want %v", wc[0].Status, c.bRecv)
					}
				}
				if dev == atSendDev || c.bEvent != 0 || c.recv {
					if b.qp.State() != verbs.QPSErr {
						t.Errorf("target QP in %v, want ERR", b.qp.State())
					}
				}
			})
		}
	}
}
