package rsocket

import (
	"bytes"
	"io"
	"testing"

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
