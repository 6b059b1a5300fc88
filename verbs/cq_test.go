package verbs_test

import (
	"context"
	"errors"
	"runtime"
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
// nothing (one wait in 16 then spins in full, a probe, and one in up to
// 1024 while probes keep failing); one answered within it brings it back
// (twice the wait at least, WaitSpin at most) and the probes back to one
// in 16, unless, in a process confined to one CPU, it slept within 256
// waits of a spin that lost its CPU; SetWaitSpin sets the cap and the
// spin, 0 turning both off.
// spinCQ is a new CQ of a process run with GOMAXPROCS procs for the test:
// the rules after a spin that lost its CPU are those of a process
// confined to one CPU (and only its).
func spinCQ(t *testing.T, procs int) *verbs.CQ {
	old := runtime.GOMAXPROCS(procs)
	ctx, _, cq, _, _ := pair()
	t.Cleanup(func() {
		ctx.Close()
		runtime.GOMAXPROCS(old)
	})
	return cq
}

func TestAdaptiveSpin(t *testing.T) {
	cq := spinCQ(t, 1)
	capd := verbs.DefaultWaitSpin
	ms := time.Millisecond
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("a new CQ spins %v, want %v", got, capd)
	}
	cq.WaitTook(ms, verbs.SpinSlept) // past the cap: halved
	if got := cq.SpinFor(); got != capd/2 {
		t.Fatalf("after a wait past the spin: %v, want %v", got, capd/2)
	}
	cq.WaitTook(40*time.Microsecond, verbs.SpinSlept) // asleep, answered within the cap: doubled
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("after a wait that slept 40 µs: %v, want %v", got, capd)
	}
	cq.WaitTook(10*time.Microsecond, verbs.SpinLost) // found after the CPU was lost: halved
	if got := cq.SpinFor(); got != capd/2 {
		t.Fatalf("after a spin that lost its CPU: %v, want %v", got, capd/2)
	}
	cq.WaitTook(10*time.Microsecond, verbs.SpinSlept) // asleep soon after such a spin: halved too
	if got := cq.SpinFor(); got != capd/4 {
		t.Fatalf("after a wait that slept 10 µs right after a lost spin: %v, want %v", got, capd/4)
	}
	for range 260 {
		cq.WaitTook(ms, verbs.SpinSlept)
	}
	// probes counts the waits with the spin off; each one's outcome is
	// reported, the probes' not answered.
	probes := func(waits int) (full, off int) {
		for range waits {
			switch cq.SpinFor() {
			case 0:
				off++
			case capd:
				full++
			default:
				t.Fatal("a spin that is neither off nor a probe")
			}
			cq.WaitTook(ms, verbs.SpinSlept)
		}
		return full, off
	}
	if full, off := probes(32); full != 2 || off != 30 {
		t.Fatalf("after slow waits: %d probes and %d waits without a spin in 32, want 2 and 30", full, off)
	}
	if full, _ := probes(64); full != 1 { // two failed: one in 64
		t.Fatalf("after two failed probes: %d probes in 64 waits, want 1", full)
	}
	for range 20 {
		probes(1024)
	}
	if full, _ := probes(4096); full != 4 {
		t.Fatalf("after many failed probes: %d probes in 4096 waits, want 4 (one in 1024)", full)
	}
	// 64 waits after the lost spin, a wait asleep within the cap brings
	// the spin back (not the probes: only an answered spin does).
	cq.WaitTook(10*time.Microsecond, verbs.SpinSlept)
	if got := cq.SpinFor(); got < 20*time.Microsecond || got > capd {
		t.Fatalf("after a wait that slept 10 µs: spin %v, want 20 µs to %v", got, capd)
	}
	// Two spins in a row as long as that brought back, and asleep all the
	// same (a peer that runs only once the waiter sleeps): the waits
	// that slept within the cap no longer bring the spin back.
	cq.WaitTook(40*time.Microsecond, verbs.SpinSlept)
	cq.WaitTook(40*time.Microsecond, verbs.SpinSlept)
	if got := cq.SpinFor(); got != 0 {
		t.Fatalf("after two brought-back spins that slept: spin %v, want 0", got)
	}
	cq.WaitTook(10*time.Microsecond, verbs.SpinSlept)
	if got := cq.SpinFor(); got != 0 {
		t.Fatalf("then a wait asleep 10 µs brought the spin back to %v", got)
	}
	for range 8 {
		cq.WaitTook(ms, verbs.SpinSlept)
	}
	if full, _ := probes(1024); full != 1 {
		t.Fatalf("a spin brought back by sleeping waits left the probes at %d in 1024, want 1", full)
	}
	cq.WaitTook(10*time.Microsecond, verbs.SpinAnswered)
	for range 8 {
		cq.WaitTook(ms, verbs.SpinSlept)
	}
	if full, off := probes(32); full != 2 || off != 30 {
		t.Fatalf("an answered wait resets the probes to one in 16: %d probes, %d waits without a spin in 32", full, off)
	}
	cq.WaitTook(capd, verbs.SpinAnswered)
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("after a wait of the cap answered during its spin: spin %v, want %v", got, capd)
	}
	cq.SetWaitSpin(0)
	for range 40 {
		cq.WaitTook(time.Microsecond, verbs.SpinAnswered)
		if got := cq.SpinFor(); got != 0 {
			t.Fatalf("spin off: SpinFor %v", got)
		}
	}
	cq.SetWaitSpin(ms)
	cq.WaitTook(900*time.Microsecond, verbs.SpinAnswered)
	if got := cq.SpinFor(); got != ms {
		t.Fatalf("cap 1 ms, a wait of 900 µs: spin %v, want 1ms", got)
	}
}

// A spin's result: none found is SpinSlept; found by polls that took 5 µs
// or more each on average (a thread that lost its CPU in one) is SpinLost;
// otherwise SpinAnswered.
func TestSpinResultOf(t *testing.T) {
	for _, c := range []struct {
		polls int
		spun  time.Duration
		want  verbs.SpinResult
	}{
		{0, time.Microsecond, verbs.SpinSlept},
		{1, 10 * time.Microsecond, verbs.SpinLost},
		{3, 16 * time.Microsecond, verbs.SpinLost},
		{4, 16 * time.Microsecond, verbs.SpinAnswered},
		{100, 10 * time.Microsecond, verbs.SpinAnswered},
	} {
		if got := verbs.SpinResultOf(c.polls, c.spun); got != c.want {
			t.Errorf("SpinResultOf(%d polls, %v) = %v, want %v", c.polls, c.spun, got, c.want)
		}
	}
}

// With more than one CPU, a spin that lost its CPU counts as answered, and
// sleeping waits answered within WaitSpin bring the spin back: the peer
// that shared the CPU then is one the kernel moves away once both spin.
func TestAdaptiveSpinManyCPUs(t *testing.T) {
	cq := spinCQ(t, 2)
	capd := verbs.DefaultWaitSpin
	ms := time.Millisecond
	cq.WaitTook(ms, verbs.SpinSlept)
	cq.WaitTook(10*time.Microsecond, verbs.SpinLost)
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("after a spin that lost its CPU: %v, want %v (counted as answered)", got, capd)
	}
	cq.WaitTook(ms, verbs.SpinSlept)
	cq.WaitTook(40*time.Microsecond, verbs.SpinSlept)
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("then a wait that slept 40 µs: spin %v, want %v", got, capd)
	}
	for range 4 {
		cq.WaitTook(40*time.Microsecond, verbs.SpinSlept)
	}
	if got := cq.SpinFor(); got != capd {
		t.Fatalf("after spins that slept although as long as the wait that brought them back: spin %v, want %v", got, capd)
	}
}
