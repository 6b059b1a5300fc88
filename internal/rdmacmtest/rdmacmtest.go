// Package rdmacmtest is a test helper, as net/http/httptest is: it makes
// connected QP pairs over each pure-Go provider (through rdmacm, or
// loop.Connect) for the tests of packages that sit above the providers
// (faults, capture). It imports rdmacm and provider/loop, so no package
// below them may import it; only _test files do.
package rdmacmtest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// End is one side of a connection, whatever made it.
type End struct {
	Ctx      *verbs.Context
	QP       *verbs.QP
	SCQ, RCQ *verbs.CQ
	MR       *verbs.MR
	Buf      []byte
	ID       *rdmacm.ID // nil over loop
}

var seq atomic.Int64

// roceAddr is a loopback address of this process's own.
func roceAddr(n byte) netip.Addr {
	p := os.Getpid()
	return netip.AddrFrom4([4]byte{127, byte(16 + p%200), byte(p / 200 % 250), 20 + n})
}

// Transports are the providers a pair can be made over.
var Transports = []string{"loop", "shm", "iwarp", "roce"}

func listenAddr(tr string) (listen, src string) {
	n := seq.Add(1)
	switch tr {
	case "shm":
		return fmt.Sprintf("unix:@goverbs-testpair-%d-%d", os.Getpid(), n), ""
	case "iwarp":
		return "127.0.0.1:0", ""
	}
	return fmt.Sprintf("roce://%v:%d", roceAddr(0), 7100+n), roceAddr(1).String()
}

// Cap is the capabilities of the pairs' QPs.
var Cap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}

// Connect makes a connected RC pair over tr (one of Transports), with
// retry as the RoCE QPs' retry count, cleaned up with t.
func Connect(t *testing.T, tr string, retry uint8) (a, b *End) {
	t.Helper()
	if tr == "loop" {
		return loopPair(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, src := listenAddr(tr)
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan *rdmacm.ID, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			if err = req.CreateQP(nil, verbs.QPInitAttr{Cap: Cap}); err == nil {
				err = req.Accept(ctx, nil)
			}
		}
		if err != nil {
			t.Error(err)
			req = nil
		}
		got <- req
	}()
	c, err := rdmacm.DialFrom(ctx, src, ln.LocalAddr().String(), &verbs.QPInitAttr{Cap: Cap}, &rdmacm.ConnParam{RetryCount: int(retry), RNRRetryCount: 7, ResponderResources: 16, InitiatorDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s == nil {
		t.FailNow()
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return idEnd(t, c), idEnd(t, s)
}

func idEnd(t *testing.T, id *rdmacm.ID) *End {
	e := &End{Ctx: id.DeviceContext(), QP: id.QP(), SCQ: id.SendCQ(), RCQ: id.RecvCQ(), ID: id, Buf: make([]byte, 4096)}
	var err error
	if e.MR, err = id.PD().RegMR(e.Buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.MR.Dereg() })
	return e
}

var loopDevs = [2]string{loop.AddDevice("pair-a"), loop.AddDevice("pair-b")}

func loopPair(t *testing.T) (a, b *End) {
	var ends [2]*End
	for i := range ends {
		ctx, err := verbs.OpenDevice(loopDevs[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		pd, _ := ctx.AllocPD()
		e := &End{Ctx: ctx, Buf: make([]byte, 4096)}
		e.SCQ, _ = ctx.CreateCQ(32, nil)
		e.RCQ, _ = ctx.CreateCQ(32, nil)
		if e.QP, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: e.SCQ, RecvCQ: e.RCQ, Cap: Cap}); err != nil {
			t.Fatal(err)
		}
		if e.MR, err = pd.RegMR(e.Buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.QP.Destroy(); e.MR.Dereg(); e.SCQ.Destroy(); e.RCQ.Destroy(); pd.Dealloc() })
		ends[i] = e
	}
	if err := loop.Connect(ends[0].QP, ends[1].QP); err != nil {
		t.Fatal(err)
	}
	return ends[0], ends[1]
}

// Write is an 8-byte signaled RDMA WRITE from e's buffer at off to to's
// at off.
func (e *End) Write(wrid uint64, to *End, off int) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{e.MR.SGE(off, 8)}, RemoteAddr: to.MR.Addr() + uint64(off), RKey: to.MR.RKey()}
}
