package rsocket

import (
	"context"
	"testing"
	"time"
)

// blockedWait ends one wait that blocked and lasted d.
func blockedWait(dir *direction, d time.Duration) {
	w := waitState{i: 1, blocking: true, start: time.Now().Add(-d)}
	w.done(dir)
}

// spinOff reports whether a direction's adaptive spin is off: of two
// waits in a row at most one can be a probe (which spins in full).
func spinOff(d *direction) bool {
	first := d.spin.For()
	return first == 0 || d.spin.For() == 0
}

// A direction's spin follows verbs.AdaptiveSpin's rules: waits that last
// longer than its cap halve it down to none, a call that did not wait
// changes nothing, and a wait that slept but was over within the cap
// brings it back, to twice that wait at least.
func TestSpinFollowsWaits(t *testing.T) {
	var d direction
	d.init(maxSpin)
	defer d.timer.Stop()
	defer d.nudge.Stop()
	long := 4 * maxSpin
	n := 0
	for ; !spinOff(&d); n++ {
		if n == 20 {
			t.Fatalf("spin still on after %d waits of %v, its cap %v", n, long, maxSpin)
		}
		blockedWait(&d, long)
	}
	if n < 2 {
		t.Fatalf("spin off after %d waits of %v: want it halved first", n, long)
	}
	(&waitState{}).done(&d) // a call that found its data at once
	if !spinOff(&d) {
		t.Fatal("a call that did not wait turned the spin on")
	}
	blockedWait(&d, maxSpin/4)
	if got := d.spin.For(); got < maxSpin/2 {
		t.Fatalf("after a wait of %v: spin %v, want at least %v", maxSpin/4, got, maxSpin/2)
	}
}

// With the spin off, a Read still gets data that comes after it blocked.
func TestReadWithSpinOff(t *testing.T) {
	for _, tr := range []string{"loop", "unix"} {
		t.Run(tr, func(t *testing.T) {
			a, b := pair(t, tr)
			defer b.Close()
			defer a.Close()
			buf := make([]byte, 8)
			// Each write comes well after the Read began to wait (the
			// writer's sleep starts before the Read), long after any
			// spin, until the spin is off.
			const after = 4 * maxSpin
			for i := 0; !spinOff(&b.rd); i++ {
				if i == 20 {
					t.Fatalf("spin on after %d reads that waited %v", i, after)
				}
				go func() {
					time.Sleep(after)
					a.Write([]byte("x"))
				}()
				if _, err := b.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := b.Read(buf)
				done <- err
			}()
			time.Sleep(time.Millisecond) // the Read blocks (or is about to)
			if _, err := a.Write([]byte("y")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a Read with the spin off missed its data")
			}
		})
	}
}

// A wait context keeps its channel until something fires it, and fire
// does nothing while no call is armed.
func TestWaitCtxReuse(t *testing.T) {
	var w waitCtx
	w.arm()
	ch := w.Done()
	w.disarm()
	w.fire()
	select {
	case <-ch:
		t.Fatal("fire closed the channel of a disarmed context")
	default:
	}
	w.arm()
	if w.Done() != ch {
		t.Fatal("arm made a new channel although the old one was not fired")
	}
	woken := false
	w.SetWake(func() { woken = true })
	w.fire()
	select {
	case <-ch:
	default:
		t.Fatal("fire did not close an armed context's channel")
	}
	if !woken || w.Err() != context.Canceled {
		t.Fatalf("after fire: woken %v, Err %v", woken, w.Err())
	}
	w.SetWake(nil)
	w.arm()
	if w.Done() == ch || w.Err() != nil {
		t.Fatal("arm after a fire did not make a fresh channel")
	}
}

// The idle timer hands polling to the waiter only idleHandoff after the
// last call ended: fired earlier it sets itself again for the rest.
func TestIdleHandoffAfterLastCall(t *testing.T) {
	a, b := pair(t, "loop")
	defer b.Close()
	defer a.Close()
	a.idleTimer.Stop()
	for len(a.needWait) > 0 {
		<-a.needWait
	}
	a.idlePending.Store(false)
	a.idleAt.Store(int64(time.Since(a.epoch)))
	a.idleFired()
	if len(a.needWait) != 0 {
		t.Fatal("handed off right after a call ended")
	}
	if !a.idlePending.Load() {
		t.Fatal("the timer was not set again for the rest of idleHandoff")
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(a.needWait) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no hand-off after idleHandoff")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
