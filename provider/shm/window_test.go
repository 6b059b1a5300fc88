package shm_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// mapDirect posts WRITEs to the peer's region win until one goes out
// directly from PostSend (the first asks for the mapping); also for
// another region once one went direct (WRITEs to it go through the peer
// until its own mapping is in).
func mapDirect(t *testing.T, a *conformance.Side, ca *shm.Conn, win *verbs.MR) {
	t.Helper()
	for p0, i := ca.PostedOneSided(), 0; ca.PostedOneSided() == p0; i++ {
		a.MustPostSend(t, wr(100, verbs.WRRDMAWrite, a.MR.SGE(0, 8), win.RemoteAddr(0), win.RKey()))
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 100, verbs.WCSuccess, verbs.WCRDMAWrite)
		if i == 10000 {
			t.Fatal("writes never went direct")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestRevokeIdleHolder: the direct path keeps the peer's region held
// between PostSends; a requester that went idle holding it does not hold
// up its revocation: Dereg does not fail the connection (as a peer that
// did not release would), and the next WRITE to the key is refused.
func TestRevokeIdleHolder(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, cb := pairOn(t, true, 64<<10)
	x, y := ca.(*shm.Conn), cb.(*shm.Conn)
	win, err := b.PD.RegMR(b.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	mapDirect(t, a, x, win)
	if !x.HoldsDirect() {
		t.Fatal("the direct path let go of the region after its PostSend")
	}
	if err := win.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := y.Failed(); err != nil {
		t.Fatalf("Dereg failed the connection: %v", err)
	}
	// The connection lives on: a WRITE to another region goes out.
	conformance.Fill(a.Buf[:64], 4)
	a.MustPostSend(t, wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 64), b.MR.RemoteAddr(0), b.MR.RKey()))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	if !bytes.Equal(b.Buf[:64], a.Buf[:64]) {
		t.Fatal("the WRITE was not placed")
	}
	a.MustPostSend(t, wr(2, verbs.WRRDMAWrite, a.MR.SGE(0, 64), win.RemoteAddr(0), win.RKey()))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCRemAccessErr, 0)
}

// TestRevokeWhileWriting: a revocation that comes while a direct WRITE
// of the peer's is between its checks and its copy (held there by a
// hook) waits for the copy: the WRITE found the region exported, so its
// open window must hold Dereg up (the handshake), and the data has landed
// when Dereg returns. Without the wait, Dereg would return first.
func TestRevokeWhileWriting(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	win, err := b.PD.RegMR(b.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	mapDirect(t, a, ca.(*shm.Conn), win)
	inside, resume, waits := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	restore := shm.InWindow(func() {
		once.Do(func() {
			close(inside)
			<-resume
		})
	}, func() {
		select {
		case waits <- struct{}{}:
		default:
		}
	})
	defer restore()
	binary.LittleEndian.PutUint64(a.Buf[:8], 0x5eed)
	posted := make(chan error, 1)
	go func() {
		posted <- a.QP.PostSend([]verbs.SendWR{wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 8), win.RemoteAddr(0), win.RKey())})
	}()
	<-inside
	dereged := make(chan error, 1)
	go func() { dereged <- win.Dereg() }()
	select {
	case err := <-dereged:
		close(resume)
		<-posted
		t.Fatalf("Dereg returned (%v) while a direct WRITE was inside its window", err)
	case <-waits:
	}
	close(resume)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if err := <-dereged; err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint64(b.Buf[4096:]); v != 0x5eed {
		t.Fatalf("the WRITE Dereg waited for did not land: %#x", v)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
}

// TestDeregWithOpenWindow: a peer stopped inside a direct window (its
// window count odd) holds up a revocation of a region it maps for at most
// engine.RevokeWait; then its connection ends.
func TestDeregWithOpenWindow(t *testing.T) {
	leakcheck.Check(t)
	victim, attacker, cv, ca := hostilePair(t)
	mr, err := victim.PD.RegMR(victim.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	mapDirect(t, attacker, ca, mr)
	ca.OpenWindow()
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := waitEnd(t, cv, "peer with an open window"); err == nil || !strings.Contains(err.Error(), "did not release") {
		t.Errorf("the connection ended with %v", err)
	}
}

// TestDirectWriteReadAllocateNothing: a WRITE and a READ posted alone,
// carried out from PostSend (engine's postOne, the transport's OneSided),
// and their polls allocate nothing.
func TestDirectWriteReadAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b, ca, _ := pairOn(t, true, 64<<10)
	x := ca.(*shm.Conn)
	mapDirect(t, a, x, b.MR)
	write := []verbs.SendWR{wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 64), b.MR.RemoteAddr(256), b.MR.RKey())}
	read := []verbs.SendWR{wr(2, verbs.WRRDMARead, a.MR.SGE(512, 64), b.MR.RemoteAddr(256), b.MR.RKey())}
	wc := make([]verbs.WC, 1)
	var err error
	for _, w := range [][]verbs.SendWR{write, read} {
		post := func() {
			if err == nil {
				err = a.QP.PostSend(w)
			}
			if err == nil {
				err = conformance.Spin(a.SendCQ, wc)
			}
		}
		p0 := x.PostedOneSided()
		if n := testing.AllocsPerRun(200, post); n != 0 || err != nil {
			t.Errorf("%v: %v allocations per run (%v), want 0", w[0].Opcode, n, err)
		}
		if got := x.PostedOneSided() - p0; got != 201 {
			t.Errorf("%v: %d of 201 went out directly", w[0].Opcode, got)
		}
	}
}

// TestDirectChecksSeePeerChanges: the direct path's checks of what the
// peer can change (its QP's access flags and state, its export of the
// region) stand from one PostSend to the next only while the peer's
// version is unmoved; each change moves it, so a request posted alone
// right after the change, on the region the earlier ones went to
// directly, is refused as the peer refuses it, and places nothing.
func TestDirectChecksSeePeerChanges(t *testing.T) {
	cases := []struct {
		name   string
		op     verbs.WROpcode
		change func(t *testing.T, b *conformance.Side, win *verbs.MR)
		want   verbs.WCStatus
	}{
		{"access-write", verbs.WRRDMAWrite, func(t *testing.T, b *conformance.Side, _ *verbs.MR) {
			modifyAccess(t, b.QP, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
		}, verbs.WCRemAccessErr},
		{"access-read", verbs.WRRDMARead, func(t *testing.T, b *conformance.Side, _ *verbs.MR) {
			modifyAccess(t, b.QP, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		}, verbs.WCRemAccessErr},
		{"dereg", verbs.WRRDMAWrite, func(t *testing.T, _ *conformance.Side, win *verbs.MR) {
			if err := win.Dereg(); err != nil {
				t.Fatal(err)
			}
		}, verbs.WCRemAccessErr},
		{"peer-err", verbs.WRRDMAWrite, func(t *testing.T, b *conformance.Side, _ *verbs.MR) {
			if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
		}, verbs.WCRetryExcErr},
	}
	for _, tc := range cases {
		for _, td := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/lock", true: "/td"}[td], func(t *testing.T) {
				leakcheck.Check(t)
				a, b, ca, _ := pairOnTD(t, true, 64<<10, td)
				x := ca.(*shm.Conn)
				win, err := b.PD.RegMR(b.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { win.Dereg() })
				wcOp := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead}[tc.op]
				mapDirect(t, a, x, win)
				// Posted alone, each a window of its own: the first of
				// the kind checks, the next ones find the version unmoved.
				conformance.Fill(b.Buf[4096:8192], 2)
				for i := range 3 {
					p0 := x.PostedOneSided()
					a.MustPostSend(t, wr(uint64(1+i), tc.op, a.MR.SGE(0, 8), win.RemoteAddr(0), win.RKey()))
					conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), uint64(1+i), verbs.WCSuccess, wcOp)
					if x.PostedOneSided() == p0 {
						t.Fatalf("request %d did not go out directly", i)
					}
				}
				tc.change(t, b, win)
				conformance.Fill(a.Buf[:8], 7)
				before := append([]byte(nil), b.Buf[4096:4104]...)
				p0 := x.PostedOneSided()
				a.MustPostSend(t, wr(9, tc.op, a.MR.SGE(0, 8), win.RemoteAddr(0), win.RKey()))
				conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 9, tc.want, 0)
				if got := x.PostedOneSided() - p0; got != 0 {
					t.Fatalf("the request after the change went out directly (%d)", got)
				}
				if !bytes.Equal(b.Buf[4096:4104], before) {
					t.Fatalf("the refused request placed its data: %x", b.Buf[4096:4104])
				}
			})
		}
	}
}

// modifyAccess sets a QP's access flags (RTS to RTS).
func modifyAccess(t *testing.T, q *verbs.QP, acc verbs.AccessFlags) {
	t.Helper()
	if err := q.Modify(&verbs.QPAttr{QPAccessFlags: acc}, verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
}
