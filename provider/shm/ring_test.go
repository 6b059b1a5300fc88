package shm

import (
	"encoding/binary"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
				putRec(r, rec{size: uint32(len(r)), kind: recSend, flags: fFirst | fLast, n: 8, total: 8})
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

// TestRingRewind checks that a producer whose consumer has taken everything
// goes back to the start of the ring once past hotSize (a pad to the end),
// that the consumer follows, and that it does not rewind while records are
// unconsumed.
// reqRing returns both ends of the request ring of a fresh segment.
func reqRing(t *testing.T, l layout) (*prodRing, *consRing) {
	t.Helper()
	s, fd, err := newSegment(l)
	if err != nil {
		t.Fatal(err)
	}
	closeFds([]int{fd})
	t.Cleanup(s.unmap)
	var p prodRing
	var c consRing
	p.init(s, ctlReq, l.reqOff(), l.reqSize)
	c.init(s, ctlReq, l.reqOff(), l.reqSize)
	return &p, &c
}

func TestRingRewind(t *testing.T) {
	p, c := reqRing(t, layout{reqSize: 64 << 10, respSize: 4096, slots: 8})
	put := func(v uint32) {
		t.Helper()
		b := p.reserve(recSize(8))
		if b == nil {
			t.Fatal("ring full")
		}
		putRec(b, rec{size: uint32(len(b)), kind: recSend, flags: fFirst | fLast, n: 8, imm: v, total: 8})
		p.commit(len(b))
		p.publish()
	}
	take := func(v uint32) {
		t.Helper()
		var h rec
		_, ok, err := c.peek(&h)
		if err != nil || !ok || h.imm != v {
			t.Fatalf("peek: %v %v imm %d, want %d", err, ok, h.imm, v)
		}
		c.advance(&h)
		c.publish()
	}
	var v uint32
	for p.tail < hotSize {
		put(v)
		take(v)
		v++
	}
	// Unconsumed: no rewind.
	put(v)
	before := p.tail
	p.rewind(atomic.LoadUint64(p.c.head))
	if p.tail != before {
		t.Fatalf("rewound over an unconsumed record (tail %d -> %d)", before, p.tail)
	}
	take(v)
	v++
	p.rewind(atomic.LoadUint64(p.c.head))
	if p.tail&p.mask != 0 {
		t.Fatalf("consumer caught up past hotSize, but the tail stays at offset %d", p.tail&p.mask)
	}
	for range 3 {
		put(v)
		take(v)
		v++
	}
	if c.head&c.mask != 3*uint64(recSize(8)) {
		t.Fatalf("consumer at offset %d after the rewind, want %d", c.head&c.mask, 3*recSize(8))
	}
}

// TestRingStaleWords: the word where the consumer looks for its next
// record may hold anything an earlier lap left there (nothing clears it):
// even the record's own position, as a payload word, is not a stamp; only
// the position under the ring's key is. Small records take one cache line.
func TestRingStaleWords(t *testing.T) {
	p, c := reqRing(t, layout{reqSize: 4096, respSize: 4096, slots: 8})
	if p.key == 0 || p.key != c.key {
		t.Fatalf("producer key %#x, consumer key %#x", p.key, c.key)
	}
	var h rec
	for lap := range 3 {
		for c.head < uint64(lap+1)*uint64(len(c.data)) {
			at := c.head & c.mask
			// What an earlier lap's payload could have left there.
			for _, stale := range []uint64{c.head, c.head | stampPad, c.head ^ 1, 0, ^uint64(0)} {
				binary.NativeEndian.PutUint64(c.data[at:], stale)
				if _, ok, err := c.peek(&h); ok || err != nil {
					t.Fatalf("lap %d, position %d: stale word %#x taken for a record (err %v)", lap, c.head, stale, err)
				}
			}
			b := p.reserve(recSize(8))
			if b == nil {
				t.Fatal("ring full")
			}
			if len(b) != 64 {
				t.Fatalf("an 8-byte message takes %d bytes, want one 64-byte line", len(b))
			}
			putRec(b, rec{size: uint32(len(b)), kind: recSend, flags: fFirst | fLast, n: 8, total: 8})
			p.commit(len(b))
			if _, ok, err := c.peek(&h); !ok || err != nil {
				t.Fatalf("lap %d, position %d: committed record not found (err %v)", lap, c.head, err)
			}
			c.advance(&h)
			c.publish()
		}
	}
}

// TestSetupVersion: a connection message of another protocol version (a
// peer whose rings are laid out differently) is refused, not misread.
func TestSetupVersion(t *testing.T) {
	b := (&setup{typ: msgHello, qpn: 7, l: defaultLayout, pdata: []byte("x")}).marshal()
	var s setup
	if err := s.unmarshal(b); err != nil || s.qpn != 7 || s.l != defaultLayout || string(s.pdata) != "x" {
		t.Fatalf("round trip: %v, %+v", err, s)
	}
	binary.LittleEndian.PutUint16(b[26:], protoVersion-1)
	if err := s.unmarshal(b); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("version %d accepted: %v", protoVersion-1, err)
	}
}
