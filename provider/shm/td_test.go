package shm_test

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// TestThreadDomainDirect: on a QP of a thread domain, a WRITE and a READ
// posted alone go out from PostSend without the QP's lock, place their
// data, and (with their polls) allocate nothing.
func TestThreadDomainDirect(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOnTD(t, true, 64<<10, true)
	x := ca.(*shm.Conn)
	mapDirect(t, a, x, b.MR)
	conformance.Fill(a.Buf[:64], 7)
	p0 := x.PostedOneSided()
	a.MustPostSend(t, wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 64), b.MR.RemoteAddr(256), b.MR.RKey()))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	a.MustPostSend(t, wr(2, verbs.WRRDMARead, a.MR.SGE(1024, 64), b.MR.RemoteAddr(256), b.MR.RKey()))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(b.Buf[256:320], a.Buf[:64]) || !bytes.Equal(a.Buf[1024:1088], a.Buf[:64]) {
		t.Fatal("the WRITE or the READ did not move the data")
	}
	if got := x.PostedOneSided() - p0; got != 2 {
		t.Fatalf("%d of 2 went out directly", got)
	}
	if raceEnabled {
		return // the race detector allocates
	}
	wc := make([]verbs.WC, 1)
	var err error
	for _, w := range [][]verbs.SendWR{
		{wr(3, verbs.WRRDMAWrite, a.MR.SGE(0, 8), b.MR.RemoteAddr(256), b.MR.RKey())},
		{wr(4, verbs.WRRDMARead, a.MR.SGE(512, 8), b.MR.RemoteAddr(256), b.MR.RKey())},
	} {
		post := func() {
			if err == nil {
				err = a.QP.PostSend(w)
			}
			if err == nil {
				err = conformance.Spin(a.SendCQ, wc)
			}
		}
		if n := testing.AllocsPerRun(200, post); n != 0 || err != nil {
			t.Errorf("%v: %v allocations per run (%v), want 0", w[0].Opcode, n, err)
		}
	}
}

// TestThreadDomainTeardownRace: a thread domain's poster streams 8-byte
// WRITEs without the QP's lock while other goroutines take it (Query,
// Counters), move the QP to ERR (the transport's Shutdown drops the
// mapping the poster copies into), and the peer's QP goes away. The
// poster must never see the QP's or the transport's state half changed
// nor copy into memory being unmapped: the race detector reports the
// first, the second crashes.
func TestThreadDomainTeardownRace(t *testing.T) {
	for _, end := range []string{"modify", "peer", "destroy"} {
		t.Run(end, func(t *testing.T) {
			leakcheck.Check(t)
			a, b, ca, _ := pairOnTD(t, true, 64<<10, true)
			mapDirect(t, a, ca.(*shm.Conn), b.MR)
			var posted atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(3)
			go func() { // the poster, as perf's bandwidth loop posts
				defer wg.Done()
				w := []verbs.SendWR{wr(0, verbs.WRRDMAWrite, a.MR.SGE(0, 8), b.MR.RemoteAddr(64), b.MR.RKey())}
				wc := make([]verbs.WC, 16)
				for i := 0; ; i++ {
					w[0].Flags = 0
					if i%16 == 15 {
						w[0].Flags = verbs.SendSignaled
					}
					err := a.QP.PostSend(w)
					if _, perr := a.SendCQ.Poll(wc); perr != nil && !errors.Is(perr, verbs.ErrInvalidState) {
						t.Errorf("Poll: %v", perr)
						return
					}
					posted.Add(1)
					if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
						return // destroyed
					}
					select {
					case <-stop: // (in ERR, requests are still posted, and flushed)
						return
					default:
					}
				}
			}()
			go func() { // lockers
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					a.QP.Query()
					a.QP.Counters()
				}
			}()
			go func() { // the teardown, once the poster is well under way
				defer wg.Done()
				defer close(stop)
				for posted.Load() < 2000 {
					a.QP.Query() // a locker meanwhile (and a yield)
				}
				switch end {
				case "modify":
					if err := a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
						t.Errorf("Modify: %v", err)
					}
				case "peer":
					if err := b.QP.Destroy(); err != nil {
						t.Errorf("peer's Destroy: %v", err)
					}
					// The poster goes on until the connection's end
					// reaches its QP: then a request fails.
					a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
				case "destroy":
					if err := a.QP.Destroy(); err != nil {
						t.Errorf("Destroy: %v", err)
					}
				}
			}()
			wg.Wait()
		})
	}
}

// TestPostAloneAfterStateChange: a WRITE posted alone that went out
// directly leaves the QP's checks answered until the QP's lock is next
// taken; moving the QP to ERR takes it, so the next WRITE posted alone,
// with or without a thread domain, is flushed and places nothing.
func TestPostAloneAfterStateChange(t *testing.T) {
	for _, td := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock", true: "td"}[td], func(t *testing.T) {
			leakcheck.Check(t)
			a, b, ca, _ := pairOnTD(t, true, 64<<10, td)
			x := ca.(*shm.Conn)
			mapDirect(t, a, x, b.MR)
			conformance.Fill(a.Buf[:8], 3)
			for i := range 3 {
				a.MustPostSend(t, wr(uint64(1+i), verbs.WRRDMAWrite, a.MR.SGE(0, 8), b.MR.RemoteAddr(64), b.MR.RKey()))
				conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), uint64(1+i), verbs.WCSuccess, verbs.WCRDMAWrite)
			}
			p0 := x.PostedOneSided()
			if err := a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			conformance.Fill(a.Buf[:8], 9)
			a.MustPostSend(t, wr(9, verbs.WRRDMAWrite, a.MR.SGE(0, 8), b.MR.RemoteAddr(128), b.MR.RKey()))
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 9, verbs.WCWRFlushErr, verbs.WCRDMAWrite)
			if got := x.PostedOneSided() - p0; got != 0 || !bytes.Equal(b.Buf[128:136], make([]byte, 8)) {
				t.Fatalf("a WRITE posted in ERR went out directly (%d) or placed its data (%x)", got, b.Buf[128:136])
			}
		})
	}
}
