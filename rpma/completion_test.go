package rpma_test

// Each rule of rpma_cq_get_completion(3) (../shared/seeds) is a test here.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

// remoteOf returns the server region as the client knows it (through its descriptor).
func remoteOf(t testing.TB, mr *rpma.MR) *rpma.RemoteMR {
	t.Helper()
	r, err := rpma.RemoteMRFromDescriptor(mr.Descriptor())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// "All operations generate completion on error. The operations posted with
// the RPMA_F_COMPLETION_ALWAYS flag also generate a completion on success."
func TestGetCompletionSuccessOnlyWithCompletionAlways(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	target := regMR(t, sp, make([]byte, 256), rpma.UsageWriteDst|rpma.UsageReadSrc)
	_, client := pair(t, sp, cp, pairOpts{})
	remote := remoteOf(t, target)
	src := regMR(t, cp, []byte("0123456789abcdef"), rpma.UsageWriteSrc)
	dst := regMR(t, cp, make([]byte, 16), rpma.UsageReadDst)

	if err := client.Write(remote, 0, src, 0, 16, rpma.CompletionOnError, 1); err != nil {
		t.Fatal(err)
	}
	if err := client.Read(dst, 0, remote, 0, 16, rpma.CompletionOnError, 2); err != nil {
		t.Fatal(err)
	}
	// A signaled operation after them completes after them (send queue
	// order): had they produced completions, they would come first.
	if err := client.Read(dst, 0, remote, 0, 16, rpma.CompletionAlways, 3); err != nil {
		t.Fatal(err)
	}
	c := next(t, client.CQ())
	if c.OpContext != 3 || c.Op != rpma.OpRead || c.Status != verbs.WCSuccess || c.ByteLen != 16 {
		t.Fatalf("first completion %+v, want the COMPLETION_ALWAYS read (op context 3)", c)
	}
	expectEmpty(t, client.CQ())
	if err := client.Write(remote, 0, src, 0, 16, rpma.CompletionAlways, 4); err != nil {
		t.Fatal(err)
	}
	if c := next(t, client.CQ()); c.OpContext != 4 || c.Op != rpma.OpWrite || c.Status != verbs.WCSuccess {
		t.Fatalf("write completion %+v", c)
	}
	// Flags other than the two are refused.
	for _, f := range []rpma.CompletionFlags{0, 2, 4} {
		if err := client.Write(remote, 0, src, 0, 16, f, 5); !errors.Is(err, rpma.ErrInval) {
			t.Errorf("flags %d: %v, want ErrInval", f, err)
		}
	}
}

// An operation posted with COMPLETION_ON_ERROR that fails completes, with
// its op context and an error status; "only op_context of the returned
// cmpl is valid".
func TestGetCompletionErrorsAlways(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	target := regMR(t, sp, make([]byte, 256), rpma.UsageWriteDst|rpma.UsageReadSrc)
	_, client := pair(t, sp, cp, pairOpts{})
	desc := target.Descriptor()
	desc[16] ^= 0xff // a remote key the server does not have
	bad, err := rpma.RemoteMRFromDescriptor(desc)
	if err != nil {
		t.Fatal(err)
	}
	dst := regMR(t, cp, make([]byte, 16), rpma.UsageReadDst)
	if err := client.Read(dst, 0, bad, 0, 16, rpma.CompletionOnError, 77); err != nil {
		t.Fatal(err)
	}
	c := next(t, client.CQ())
	if c.OpContext != 77 || c.Status == verbs.WCSuccess {
		t.Fatalf("completion %+v, want op context 77 with an error status", c)
	}
	if c.Status != verbs.WCRemAccessErr {
		t.Errorf("status %v, want %v", c.Status, verbs.WCRemAccessErr)
	}
	if c.ByteLen != 0 || c.Imm != 0 || c.Flags != 0 {
		t.Errorf("failed completion carries fields besides op context and status: %+v", c)
	}
	// Over iWARP the access error ended the connection (a Terminate): LOST,
	// not CLOSED. Over shm and RoCE (InfiniBand semantics) both QPs fail
	// but the connection stays until it is closed.
	if !strings.HasPrefix(testAddr, "unix:") && !strings.HasPrefix(testAddr, "roce:") {
		expectEvent(t, client, rpma.ConnLost)
	}
}

// "if the provided cq is the main CQ and the receive CQ is present on the
// same connection this function won't return RPMA_OP_RECV and
// RPMA_OP_RECV_RDMA_WITH_IMM at any time. The receive CQ has to be used
// instead to collect these completions."
func TestGetCompletionReceivesOnRCQ(t *testing.T) {
	leakcheck.Check(t)
	for _, rcq := range []bool{false, true} {
		t.Run(fmt.Sprintf("rcq=%v", rcq), func(t *testing.T) {
			sp, cp := newPeer(t), newPeer(t)
			scfg := rpma.NewConnCfg()
			if rcq {
				scfg.SetRCQSize(8)
			}
			rbuf := regMR(t, sp, make([]byte, 256), rpma.UsageRecv|rpma.UsageWriteDst)
			server, client := pair(t, sp, cp, pairOpts{scfg: scfg, beforeAccept: func(r *rpma.ConnReq) {
				if err := r.Recv(rbuf, 0, 64, 10); err != nil {
					t.Error(err)
				}
			}})
			if rcq != (server.RCQ() != nil) || client.RCQ() != nil {
				t.Fatalf("RCQ: server %v client %v", server.RCQ() != nil, client.RCQ() != nil)
			}
			if err := server.Recv(rbuf, 64, 64, 11); err != nil {
				t.Fatal(err)
			}
			msg := regMR(t, cp, []byte("ping"), rpma.UsageSend|rpma.UsageWriteSrc)
			if err := client.SendWithImm(msg, 0, 4, 0xdeadbeef, rpma.CompletionAlways, 1); err != nil {
				t.Fatal(err)
			}
			if err := client.WriteWithImm(remoteOf(t, rbuf), 128, msg, 0, 4, 0x01020304, rpma.CompletionAlways, 2); err != nil {
				t.Fatal(err)
			}
			recvCQ := server.CQ()
			if rcq {
				recvCQ = server.RCQ()
			}
			c := next(t, recvCQ)
			if c.OpContext != 10 || c.Op != rpma.OpRecv || c.ByteLen != 4 || c.Imm != 0xdeadbeef || c.Flags&verbs.WCFlagWithImm == 0 {
				t.Fatalf("send-with-imm receive %+v", c)
			}
			c = next(t, recvCQ)
			if c.OpContext != 11 || c.Op != rpma.OpRecvRDMAWithImm || c.Imm != 0x01020304 || c.ByteLen != 4 {
				t.Fatalf("write-with-imm receive %+v", c)
			}
			if string(rbuf.Bytes()[128:132]) != "ping" || string(rbuf.Bytes()[:4]) != "ping" {
				t.Fatalf("data %q %q", rbuf.Bytes()[:4], rbuf.Bytes()[128:132])
			}
			if rcq {
				expectEmpty(t, server.CQ())
			}
			expectEmpty(t, recvCQ)
		})
	}
}

// "RPMA_E_INVAL - cq or cmpl is NULL"
func TestGetCompletionErrInval(t *testing.T) {
	var c rpma.Completion
	var nilCQ *rpma.CQ
	if err := nilCQ.GetCompletion(&c); !errors.Is(err, rpma.ErrInval) || rpma.Code(err) != -100004 {
		t.Fatalf("nil CQ: %v (code %d)", err, rpma.Code(err))
	}
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	_, client := pair(t, sp, cp, pairOpts{})
	if err := client.CQ().GetCompletion(nil); !errors.Is(err, rpma.ErrInval) {
		t.Fatalf("nil completion: %v", err)
	}
	if _, err := client.CQ().GetWC(nil); !errors.Is(err, rpma.ErrInval) {
		t.Fatalf("GetWC with no room: %v", err)
	}
}

// "RPMA_E_NO_COMPLETION - no completions available"
func TestGetCompletionErrNoCompletion(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	_, client := pair(t, sp, cp, pairOpts{})
	var c rpma.Completion
	err := client.CQ().GetCompletion(&c)
	if !errors.Is(err, rpma.ErrNoCompletion) || rpma.Code(err) != -100005 {
		t.Fatalf("empty CQ: %v", err)
	}
	var wc [2]verbs.WC
	if _, err := client.CQ().GetWC(wc[:]); !errors.Is(err, rpma.ErrNoCompletion) {
		t.Fatalf("GetWC on an empty CQ: %v", err)
	}
}

// "RPMA_E_PROVIDER - ibv_poll_cq(3) failed with a provider error": an
// overflowed CQ gives its completions, then the provider's error.
func TestGetCompletionErrProvider(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	target := regMR(t, sp, make([]byte, 256), rpma.UsageWriteDst)
	ccfg := rpma.NewConnCfg()
	ccfg.SetCQSize(1)
	ccfg.SetRCQSize(1) // the main CQ holds sends only, one of them
	_, client := pair(t, sp, cp, pairOpts{ccfg: ccfg})
	remote := remoteOf(t, target)
	src := regMR(t, cp, make([]byte, 8), rpma.UsageWriteSrc)
	for i := range 3 {
		if err := client.Write(remote, 0, src, 0, 8, rpma.CompletionAlways, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var c rpma.Completion
	var err error
	for range 100 {
		if err = client.CQ().GetCompletion(&c); err != nil && !errors.Is(err, rpma.ErrNoCompletion) {
			break
		}
	}
	if !errors.Is(err, rpma.ErrProvider) || !errors.Is(err, verbs.ErrCQOverflow) || rpma.Code(err) != -100002 {
		t.Fatalf("overflowed CQ: %v", err)
	}
}

// "RPMA_E_UNKNOWN - ibv_poll_cq(3) failed but no provider error is
// available": a failure the verbs layer does not name.
func TestGetCompletionErrUnknown(t *testing.T) {
	err := rpma.PollErr(errors.New("something"))
	if !errors.Is(err, rpma.ErrUnknown) || rpma.Code(err) != -100000 {
		t.Fatalf("unnamed poll failure: %v", err)
	}
	if err := rpma.PollErr(fmt.Errorf("x: %w", verbs.ErrCQOverflow)); !errors.Is(err, rpma.ErrProvider) {
		t.Fatalf("named poll failure: %v", err)
	}
}

// "RPMA_E_NOSUPP - not supported opcode": a completion of an operation
// librpma never posts (an atomic fetch-and-add posted on the connection's
// QP directly); its op context is still returned.
func TestGetCompletionErrNoSupp(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	tbuf := make([]byte, 64)
	target, err := sp.PD().RegMR(tbuf, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Dereg()
	_, client := pair(t, sp, cp, pairOpts{})
	sink, err := cp.PD().RegMR(make([]byte, 8), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Dereg()
	err = client.QP().PostSend([]verbs.SendWR{{WRID: 42, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{sink.SGE(0, 8)}, RemoteAddr: target.RemoteAddr(0), RKey: target.RKey(), CompareAdd: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var c rpma.Completion
	for range 10000 {
		if err = client.CQ().GetCompletion(&c); !errors.Is(err, rpma.ErrNoCompletion) {
			break
		}
	}
	if !errors.Is(err, rpma.ErrNoSupp) || rpma.Code(err) != -100001 || c.OpContext != 42 {
		t.Fatalf("fetch-and-add completion: %v, %+v", err, c)
	}
}

// GetCompletion tells a flush done as a read-after-write (OpFlush) from a
// read (OpRead) on the same connection, in any order.
func TestGetCompletionFallbackFlushIsOpFlush(t *testing.T) {
	leakcheck.Check(t)
	sp, cp := newPeer(t), newPeer(t)
	target := regMR(t, sp, make([]byte, 256), rpma.UsageWriteDst|rpma.UsageReadSrc|rpma.UsageFlushTypeVisibility)
	ccfg := rpma.NewConnCfg()
	ccfg.SetExtensions(false)
	_, client := pair(t, sp, cp, pairOpts{ccfg: ccfg})
	remote := remoteOf(t, target)
	dst := regMR(t, cp, make([]byte, 16), rpma.UsageReadDst)
	want := []rpma.Op{rpma.OpRead, rpma.OpFlush, rpma.OpFlush, rpma.OpRead}
	for i, op := range want {
		var err error
		if op == rpma.OpRead {
			err = client.Read(dst, 0, remote, 0, 16, rpma.CompletionAlways, uint64(i))
		} else {
			err = client.Flush(remote, 0, 16, rpma.FlushVisibility, rpma.CompletionAlways, uint64(i))
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			// An unsignaled read in between changes nothing.
			if err := client.Read(dst, 0, remote, 0, 16, rpma.CompletionOnError, 99); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, op := range want {
		if c := next(t, client.CQ()); c.OpContext != uint64(i) || c.Op != op {
			t.Fatalf("completion %d: %+v, want %v", i, c, op)
		}
	}
}
