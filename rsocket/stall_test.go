package rsocket

import (
	"fmt"
	"io"
	"testing"
	"time"
)

func (c *Conn) dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("sqe %d sbuf %d sseq %d/%d tgt %v/%d rmsg %d-%d queued %d avail %d rseq %d/%d ctrl %d active %d gone %v sent %v err %v",
		c.sqeAvail, c.sbufAvail, c.sseqNo, c.sseqComp, c.target, c.targetSGE, c.rmsgHead, c.rmsgTail, c.rbufQueued, c.rbufAvail, c.rseqNo, c.rseqComp, c.ctrlUsed, c.active.Load(), c.peerGone, c.sentDisc, c.err)
}

func TestStall(t *testing.T) {
	for _, tr := range []string{"unix", "127.0.0.1:0"} {
		for _, size := range []int{64, 65536} {
			a, b := pair(t, tr)
			go func() {
				buf := make([]byte, size)
				for {
					if _, err := io.ReadFull(b, buf); err != nil {
						return
					}
					if _, err := b.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, size)
			start := time.Now()
			slow := 0
			for i := range 3000 {
				t0 := time.Now()
				a.Write(buf)
				done := make(chan struct{})
				go func() {
					select {
					case <-done:
					case <-time.After(50 * time.Millisecond):
						t.Logf("%s %d iter %d stuck:\n a %s\n b %s", tr, size, i, a.dump(), b.dump())
					}
				}()
				io.ReadFull(a, buf)
				close(done)
				if time.Since(t0) > 5*time.Millisecond {
					slow++
				}
			}
			t.Logf("%s %d: %v per round trip, %d slow", tr, size, time.Since(start)/3000, slow)
			a.Close()
			b.Close()
		}
	}
}

func TestCloseTime(t *testing.T) {
	for _, tr := range []string{"loop", "unix", "127.0.0.1:0"} {
		a, b := pair(t, tr)
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := io.ReadFull(b, buf); err != nil {
					return
				}
				if _, err := b.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 64)
		for range 100 {
			a.Write(buf)
			io.ReadFull(a, buf)
		}
		t0 := time.Now()
		b.Close()
		t1 := time.Now()
		t.Logf("%s: b.Close %v; a: %s", tr, t1.Sub(t0), a.dump())
		a.Close()
		t.Logf("%s: a.Close %v", tr, time.Since(t1))
	}
}
