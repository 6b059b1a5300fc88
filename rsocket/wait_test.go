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

// The spin goes off only after longWaits waits in a row that each lasted
// longWait or more, and comes back with the first shorter one; a single
// long wait (a preemption) leaves it on.
func TestSpinOffForLongWaits(t *testing.T) {
	var d direction
	d.init(maxSpin)
	defer d.timer.Stop()
	defer d.nudge.Stop()
	long := 2 * max(longWait, 2*maxSpin)
	for i := 1; i < longWaits; i++ {
		blockedWait(&d, long)
		if d.spin < minSpin {
			t.Fatalf("after %d long waits: spin %v, want at least %v", i, d.spin, minSpin)
		}
	}
	blockedWait(&d, long)
	if d.spin != 0 {
		t.Fatalf("after %d long waits: spin %v, want 0", longWaits, d.spin)
	}
	// A call that found its data at once learns nothing.
	(&waitState{}).done(&d)
	if d.spin != 0 {
		t.Fatalf("after a call that did not wait: spin %v, want 0", d.spin)
	}
	blockedWait(&d, -time.Hour) // ends "before" it began: surely short
	if d.spin != minSpin {
		t.Fatalf("after a short wait: spin %v, want %v", d.spin, minSpin)
	}
	// One long wait among short ones does not turn it off.
	blockedWait(&d, long)
	blockedWait(&d, -time.Hour)
	blockedWait(&d, long)
	blockedWait(&d, long)
	if d.spin == 0 {
		t.Fatal("spin off after long waits that were not in a row")
	}
}

// With the spin off, a Read still gets data that comes after it blocked,
// and one that comes at once turns the spin back on.
func TestReadWithSpinOff(t *testing.T) {
	for _, tr := range []string{"loop", "unix"} {
		t.Run(tr, func(t *testing.T) {
			a, b := pair(t, tr)
			defer b.Close()
			defer a.Close()
			buf := make([]byte, 8)
			// Each write comes well after the Read began to wait (the
			// writer's sleep starts before the Read: under -race or load a
			// Read that began late waited less than longWait at 2x).
			const after = 10 * longWait
			for i := 0; i < longWaits; i++ {
				go func() {
					time.Sleep(after)
					a.Write([]byte("x"))
				}()
				if _, err := b.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
			if b.rd.spin != 0 {
				t.Fatalf("spin %v after %d reads that waited %v, want 0", b.rd.spin, longWaits, after)
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
