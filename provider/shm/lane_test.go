package shm_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// TestListOneSided: a list of WRITEs and READs on two of the peer's
// regions, each at an offset of its own, goes out from PostSend (the
// engine's run on the transport's lanes): every request lands where it
// was addressed, in order (the READ of a place sees the WRITE before it
// in the list), and completes.
func TestListOneSided(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	x := ca.(*shm.Conn)
	other, err := b.PD.RegMR(b.Buf[32<<10:48<<10], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Dereg()
	mapDirect(t, a, x, b.MR)
	mapDirect(t, a, x, other)
	for i := range 4 {
		binary.LittleEndian.PutUint64(a.Buf[8*i:], uint64(0x1000+i))
	}
	wrs := []verbs.SendWR{
		wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 8), b.MR.RemoteAddr(1024), b.MR.RKey()),
		wr(2, verbs.WRRDMAWrite, a.MR.SGE(8, 8), b.MR.RemoteAddr(2048), b.MR.RKey()),
		wr(3, verbs.WRRDMARead, a.MR.SGE(4096, 8), b.MR.RemoteAddr(1024), b.MR.RKey()),
		wr(4, verbs.WRRDMAWrite, a.MR.SGE(16, 8), other.RemoteAddr(512), other.RKey()),
		wr(5, verbs.WRRDMARead, a.MR.SGE(4104, 8), other.RemoteAddr(512), other.RKey()),
		wr(6, verbs.WRRDMAWrite, a.MR.SGE(24, 16), b.MR.RemoteAddr(4000), b.MR.RKey()),
	}
	p0 := x.PostedOneSided()
	a.MustPostSend(t, wrs...)
	if got := x.PostedOneSided() - p0; got != uint64(len(wrs)) {
		t.Errorf("%d of %d requests went out from PostSend", got, len(wrs))
	}
	for i, w := range wrs {
		op := verbs.WCRDMAWrite
		if w.Opcode == verbs.WRRDMARead {
			op = verbs.WCRDMARead
		}
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), uint64(i+1), verbs.WCSuccess, op)
	}
	for _, c := range []struct {
		name      string
		got, want []byte
	}{
		{"WRITE 1", b.Buf[1024:1032], a.Buf[0:8]},
		{"WRITE 2", b.Buf[2048:2056], a.Buf[8:16]},
		{"READ 3", a.Buf[4096:4104], a.Buf[0:8]},
		{"WRITE 4", b.Buf[32<<10+512 : 32<<10+520], a.Buf[16:24]},
		{"READ 5", a.Buf[4104:4112], a.Buf[16:24]},
		{"WRITE 6", b.Buf[4000:4016], a.Buf[24:40]},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: %x, want %x", c.name, c.got, c.want)
		}
	}
	// Bytes around the places written stay as they were.
	if !bytes.Equal(b.Buf[1032:1040], make([]byte, 8)) || !bytes.Equal(b.Buf[1016:1024], make([]byte, 8)) {
		t.Errorf("a WRITE spilled: %x %x", b.Buf[1016:1024], b.Buf[1032:1040])
	}
}

// TestListOneSidedStops: a list whose third request lies past the end of
// the peer's region: the two before it go out from PostSend, it fails
// with a remote access error (reported by the peer, as when posted alone),
// and the one after it is flushed.
func TestListOneSidedStops(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	x := ca.(*shm.Conn)
	win, err := b.PD.RegMR(b.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer win.Dereg()
	mapDirect(t, a, x, win)
	conformance.Fill(a.Buf[:64], 9)
	wrs := []verbs.SendWR{
		wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 8), win.RemoteAddr(0), win.RKey()),
		wr(2, verbs.WRRDMAWrite, a.MR.SGE(8, 8), win.RemoteAddr(4088), win.RKey()),
		wr(3, verbs.WRRDMAWrite, a.MR.SGE(16, 8), win.RemoteAddr(4089), win.RKey()),
		wr(4, verbs.WRRDMAWrite, a.MR.SGE(24, 8), win.RemoteAddr(8), win.RKey()),
	}
	p0 := x.PostedOneSided()
	a.MustPostSend(t, wrs...)
	if got := x.PostedOneSided() - p0; got != 2 {
		t.Errorf("%d requests went out from PostSend, want the 2 before the bad one", got)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 3, verbs.WCRemAccessErr, 0)
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 4, verbs.WCWRFlushErr, 0)
	if !bytes.Equal(b.Buf[4096:4104], a.Buf[0:8]) || !bytes.Equal(b.Buf[8184:8192], a.Buf[8:16]) {
		t.Error("the WRITEs before the bad one did not land")
	}
	if !bytes.Equal(b.Buf[4104:4112], make([]byte, 8)) {
		t.Error("the WRITE after the bad one landed")
	}
}

// TestRevokeWhileWritingList is TestRevokeWhileWriting for a request of
// a list after the first (carried out by the engine on the transport's
// lane, in the window the list's first request opened): Dereg waits for
// its copy.
func TestRevokeWhileWritingList(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	x := ca.(*shm.Conn)
	win, err := b.PD.RegMR(b.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	mapDirect(t, a, x, win)
	inside, resume, waits := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	calls := 0
	restore := shm.InWindow(func() {
		if calls++; calls == 2 { // the list's second request
			once.Do(func() {
				close(inside)
				<-resume
			})
		}
	}, func() {
		select {
		case waits <- struct{}{}:
		default:
		}
	})
	defer restore()
	binary.LittleEndian.PutUint64(a.Buf[:8], 0x5eed)
	binary.LittleEndian.PutUint64(a.Buf[8:16], 0xfeed)
	posted := make(chan error, 1)
	p0 := x.PostedOneSided()
	go func() {
		posted <- a.QP.PostSend([]verbs.SendWR{
			wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 8), win.RemoteAddr(0), win.RKey()),
			wr(2, verbs.WRRDMAWrite, a.MR.SGE(8, 8), win.RemoteAddr(8), win.RKey()),
		})
	}()
	<-inside
	dereged := make(chan error, 1)
	go func() { dereged <- win.Dereg() }()
	select {
	case err := <-dereged:
		close(resume)
		<-posted
		t.Fatalf("Dereg returned (%v) while a direct WRITE of a list was inside its window", err)
	case <-waits:
	}
	close(resume)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if err := <-dereged; err != nil {
		t.Fatal(err)
	}
	if got := x.PostedOneSided() - p0; got != 2 {
		t.Errorf("%d of the list's 2 WRITEs went out from PostSend", got)
	}
	if v, w := binary.LittleEndian.Uint64(b.Buf[4096:]), binary.LittleEndian.Uint64(b.Buf[4104:]); v != 0x5eed || w != 0xfeed {
		t.Fatalf("the WRITEs Dereg waited for did not land: %#x %#x", v, w)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCRDMAWrite)
}

// TestDirectListAllocateNothing: a list of 16 WRITEs and READs carried out
// from PostSend, and the poll of its completions, allocate nothing.
func TestDirectListAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b, ca, _ := pairOn(t, true, 64<<10)
	x := ca.(*shm.Conn)
	mapDirect(t, a, x, b.MR)
	list := make([]verbs.SendWR, 16)
	for i := range list {
		op := verbs.WRRDMAWrite
		if i%4 == 3 {
			op = verbs.WRRDMARead
		}
		list[i] = wr(uint64(i), op, a.MR.SGE(64*i, 8), b.MR.RemoteAddr(64*i), b.MR.RKey())
		list[i].Flags = 0
	}
	list[15].Flags = verbs.SendSignaled
	wc := make([]verbs.WC, 1)
	var err error
	post := func() {
		if err == nil {
			err = a.QP.PostSend(list)
		}
		if err == nil {
			err = conformance.Spin(a.SendCQ, wc)
		}
	}
	p0 := x.PostedOneSided()
	if n := testing.AllocsPerRun(200, post); n != 0 || err != nil {
		t.Errorf("%v allocations per run (%v), want 0", n, err)
	}
	if got := x.PostedOneSided() - p0; got != 201*16 {
		t.Errorf("%d of %d went out directly", got, 201*16)
	}
}
