package rsocket

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
)

// Data messages go unsignaled while nothing runs short, the staging
// buffer, send slots and control slots all come back through the
// signaled ones (a stream several times the buffers' size goes through),
// and Close, whose disconnect is signaled, finds every request complete.
func TestSelectiveSignaling(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := pair(t, tr)
			defer b.Close()
			// Small messages: none runs a resource short.
			for i := range 8 {
				msg := []byte{byte(i), 1, 2, 3}
				if _, err := a.Write(msg); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("read %q, %v; want %q", got, err, msg)
				}
			}
			a.mu.Lock()
			pending := a.unsig.n
			a.mu.Unlock()
			if pending == 0 {
				t.Errorf("every request of 8 small writes signaled")
			}
			// Four times the staging buffer, from a writer that reads
			// nothing: it goes on only if what it holds comes back.
			big := make([]byte, 4*a.sbufSize+12345)
			for i := range big {
				big[i] = byte(i * 7)
			}
			done := make(chan error, 1)
			go func() {
				_, err := a.Write(big)
				done <- err
			}()
			got := make([]byte, len(big))
			if _, err := io.ReadFull(b, got); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, big) {
				t.Fatal("stream corrupted")
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if a.sqeAvail != a.sq || a.ctrlUsed != 0 || a.sbufAvail != a.sbufSize {
				t.Errorf("after Close: %d of %d send slots, %d control slots used, %d of %d staging bytes back",
					a.sqeAvail, a.sq, a.ctrlUsed, a.sbufAvail, a.sbufSize)
			}
		})
	}
}

// The spin grows after waits that it caught or that were answered within
// its ceiling, even waits that slept (so that it recovers once the peer
// runs again), and halves after waits that slept and took longer, down
// to minSpin.
func TestSpinAdapts(t *testing.T) {
	var d direction
	d.init(50 * time.Microsecond)
	wait := func(took time.Duration, slept bool) {
		w := waitState{i: 1, start: time.Now().Add(-took), blocking: slept}
		w.done(&d)
	}
	for range 10 {
		wait(time.Millisecond, true)
	}
	if d.spin != minSpin {
		t.Fatalf("spin %v after waits of 1 ms, want %v", d.spin, minSpin)
	}
	wait(10*time.Microsecond, true) // slept, but a spin would have caught it
	if d.spin < 20*time.Microsecond {
		t.Fatalf("spin %v after a 10 us wait that slept, want at least 20 us", d.spin)
	}
	for range 10 {
		wait(time.Millisecond, true)
	}
	// The spin caught the event, late (the spinner was preempted):
	// spinning saved a sleep.
	wait(time.Millisecond, false)
	if d.spin != d.maxSpin {
		t.Fatalf("spin %v after a wait the spin caught, want %v", d.spin, d.maxSpin)
	}
	d.init(0) // Options.Spin < 0: never
	wait(time.Microsecond, false)
	if d.spin != 0 {
		t.Fatalf("spin %v with the spin off by option", d.spin)
	}
}
