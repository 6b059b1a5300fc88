package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// A CQ's waits spin DefaultWaitSpin unless told otherwise; a negative
// spin is none.
func TestWaitSpinSetting(t *testing.T) {
	ctx, _, cq, _, _ := pair()
	defer ctx.Close()
	if got := cq.WaitSpin(); got != verbs.DefaultWaitSpin {
		t.Errorf("a new CQ spins %v, want %v", got, verbs.DefaultWaitSpin)
	}
	for _, c := range []struct{ set, want time.Duration }{{time.Millisecond, time.Millisecond}, {0, 0}, {-time.Second, 0}} {
		cq.SetWaitSpin(c.set)
		if got := cq.WaitSpin(); got != c.want {
			t.Errorf("SetWaitSpin(%v): WaitSpin %v, want %v", c.set, got, c.want)
		}
	}
}

// CQ.Wait returns for a completion that comes during its spin or after
// it, and when its context ends during an hour's spin.
func TestWaitAcrossSpin(t *testing.T) {
	ctx, pd, cq, a, b := pair()
	defer ctx.Close()
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i, spin := range []time.Duration{time.Hour, 0, time.Microsecond} {
		cq.SetWaitSpin(spin)
		if err := b.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(32, 32)}}}); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, func() {
			a.PostSend([]verbs.SendWR{{WRID: 100, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, 8)}}})
		})
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cq.Wait(c)
		cancel()
		wc := make([]verbs.WC, 1)
		if n, _ := cq.Poll(wc); err != nil || n != 1 || wc[0].WRID != uint64(i) {
			t.Fatalf("spin %v: Wait: %v, then %d completions %+v", spin, err, n, wc)
		}
	}
	cq.SetWaitSpin(time.Hour)
	c, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := cq.Wait(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with its context canceled during the spin: %v", err)
	}
}

// The wait spin adapts: waits answered past WaitSpin halve it down to
// nothing (one wait in 16 then spins in full, a probe), one answered
// within it brings it back (twice the wait at least, WaitSpin at most),
// and SetWaitSpin sets the cap and the spin, 0 turning both off.
func TestAdaptiveSpin(t *testing.T) {
	ctx, _, cq, _, _ := pair()
	defer ctx.Close()
	capd := verbs.DefaultWaitSpin
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("a new CQ spins %v, want %v", got, capd)
	}
	cq.WaitTook(time.Millisecond) // past the cap: halved
	if got := cq.SpinFor(); got != capd/2 {
		t.Fatalf("after a wait past the spin: %v, want %v", got, capd/2)
	}
	for range 10 {
		cq.WaitTook(time.Millisecond)
	}
	full, off := 0, 0
	for range 32 {
		switch cq.SpinFor() {
		case 0:
			off++
		case capd:
			full++
		default:
			t.Fatal("a spin that is neither off nor a probe")
		}
	}
	if full != 2 || off != 30 {
		t.Fatalf("after slow waits: %d probes and %d waits without a spin in 32, want 2 and 30", full, off)
	}
	cq.WaitTook(10 * time.Microsecond) // answered within the cap
	if got := cq.SpinFor(); got < 20*time.Microsecond || got > capd {
		t.Fatalf("after a wait of 10 µs: spin %v, want 20 µs to %v", got, capd)
	}
	cq.WaitTook(capd)
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("after a wait of the cap: spin %v, want %v", got, capd)
	}
	cq.SetWaitSpin(0)
	for range 40 {
		cq.WaitTook(time.Microsecond)
		if got := cq.SpinFor(); got != 0 {
			t.Fatalf("spin off: SpinFor %v", got)
		}
	}
	cq.SetWaitSpin(time.Millisecond)
	cq.WaitTook(900 * time.Microsecond)
	if got := cq.SpinFor(); got != time.Millisecond {
		t.Fatalf("cap 1 ms, a wait of 900 µs: spin %v, want 1ms", got)
	}
}
