package shm

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkRingPingPong is the floor under the provider's latency: two
// goroutines exchange one 40-byte record each way through two rings of a
// segment, with nothing else (no engine, no QP): ns/oneway is what the
// shared-memory transport itself costs.
func BenchmarkRingPingPong(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs")
	}
	l := layout{reqSize: 64 << 10, respSize: 64 << 10, slots: 8}
	s, fd, err := newSegment(l)
	if err != nil {
		b.Fatal(err)
	}
	closeFds([]int{fd})
	defer s.unmap()
	var ap, bp prodRing
	var ac, bc consRing
	ap.init(s, ctlReq, l.reqOff(), l.reqSize) // a -> b
	bc.init(s, ctlReq, l.reqOff(), l.reqSize)
	bp.init(s, ctlResp, l.respOff(), l.respSize) // b -> a
	ac.init(s, ctlResp, l.respOff(), l.respSize)
	send := func(p *prodRing) {
		for {
			if r := p.reserve(recSize(8)); r != nil {
				putRec(r, &rec{size: uint32(len(r)), kind: recSend, flags: fFirst | fLast, n: 8, total: 8})
				p.commit(len(r))
				p.publish()
				return
			}
		}
	}
	recv := func(c *consRing) {
		var h rec
		for {
			if _, ok, err := c.peek(&h); err != nil {
				panic(err)
			} else if ok {
				c.advance(&h)
				c.publish()
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range b.N {
			recv(&bc)
			send(&bp)
		}
	}()
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		send(&ap)
		recv(&ac)
	}
	el := time.Since(t0)
	wg.Wait()
	b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/2, "ns/oneway")
}
