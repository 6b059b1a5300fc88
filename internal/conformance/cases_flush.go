package conformance

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func init() {
	need := func(c Caps) bool { return c.Flush }
	register(
		Case{Name: "FlushCompletesAfterWrites", Need: need, Run: testFlushCompletesAfterWrites},
		Case{Name: "FlushNeedsFlushAccess", Need: need, Run: testFlushNeedsFlushAccess},
		Case{Name: "FlushPostChecks", Need: need, Run: testFlushPostChecks},
		Case{Name: "AtomicWriteStoresEightBytes", Need: need, Run: testAtomicWriteStoresEightBytes},
	)
}

const flushAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead |
	verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent

// FLUSH of either type completes (IBV_WC_FLUSH) after the writes before it,
// whose data is then in the target region.
func testFlushCompletesAfterWrites(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Access: flushAccess})
	Fill(a.Buf[:4096], 3)
	a.MustPostSend(t,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.RemoteAddr(100), RKey: b.MR.RKey()},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: b.MR.RemoteAddr(100), RKey: b.MR.RKey(),
			FlushLen: 4096, FlushType: verbs.FlushGlobal},
		verbs.SendWR{WRID: 3, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: b.MR.RemoteAddr(100), RKey: b.MR.RKey(),
			FlushLen: 4096, FlushType: verbs.FlushPersistent})
	wc := PollN(t, a.SendCQ, 2)
	ExpectWC(t, wc[0], 2, verbs.WCSuccess, verbs.WCFlush)
	ExpectWC(t, wc[1], 3, verbs.WCSuccess, verbs.WCFlush)
	if !bytes.Equal(b.Buf[100:4196], a.Buf[:4096]) {
		t.Fatal("the flushed range does not hold the written data")
	}
}

// A region registered without the flush access of the requested type refuses it.
func testFlushNeedsFlushAccess(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessFlushGlobal})
	a.MustPostSend(t, verbs.SendWR{WRID: 7, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(),
		FlushLen: 8, FlushType: verbs.FlushPersistent})
	wc := Poll1(t, a.SendCQ)
	if wc.WRID != 7 || wc.Status == verbs.WCSuccess {
		t.Fatalf("persistent flush of a region without FLUSH_PERSISTENT: %s", Describe(wc))
	}
}

// PostSend refuses a FLUSH with data or an unknown type, and an ATOMIC_WRITE
// that is not 8 bytes.
func testFlushPostChecks(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Access: flushAccess})
	bad := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRFlush, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), FlushLen: 8, FlushType: 3},
		{WRID: 2, Opcode: verbs.WRFlush, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), FlushLen: 8, FlushType: verbs.FlushGlobal,
			SGList: []verbs.SGE{a.MR.SGE(0, 8)}},
		{WRID: 3, Opcode: verbs.WRAtomicWrite, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), SGList: []verbs.SGE{a.MR.SGE(0, 4)}},
	}
	for i := range bad {
		ExpectPostErr(t, a.QP.PostSend(bad[i:i+1]), 0, verbs.ErrInvalid)
	}
}

// ATOMIC_WRITE stores its 8 bytes, in memory order, at the aligned target.
func testAtomicWriteStoresEightBytes(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Access: flushAccess})
	binary.LittleEndian.PutUint64(a.Buf[8:], 0x1122334455667788)
	a.MustPostSend(t, verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(8, 8)}, RemoteAddr: b.MR.RemoteAddr(64), RKey: b.MR.RKey()})
	ExpectWC(t, Poll1(t, a.SendCQ), 5, verbs.WCSuccess, verbs.WCAtomicWrite)
	if !bytes.Equal(b.Buf[64:72], a.Buf[8:16]) {
		t.Fatalf("target holds % x, want % x", b.Buf[64:72], a.Buf[8:16])
	}
}
