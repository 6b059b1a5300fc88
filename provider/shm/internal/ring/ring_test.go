package ring

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkRingPingPong is the floor under the provider's latency: two
// goroutines exchange one 40-byte record each way through two rings of a
// segment, with nothing else (no engine, no QP): ns/oneway is what the
// shared-memory transport itself costs.
func BenchmarkRingPingPong(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs")
	}
	s := newTestSegment(b, 4096+128<<10)
	var ap, bp Producer
	var ac, bc Consumer
	ap.Init(s, 0, 4096, 64<<10, 5) // a -> b
	bc.Init(s, 0, 4096, 64<<10, 5)
	bp.Init(s, CtlSize, 4096+64<<10, 64<<10, 7) // b -> a
	ac.Init(s, CtlSize, 4096+64<<10, 64<<10, 7)
	send := func(p *Producer) {
		for {
			if r := p.Reserve(Size(8)); r != nil {
				PutRec(r, Rec{Size: uint32(len(r)), Kind: 2, Flags: 3, N: 8, Total: 8})
				p.Commit(len(r))
				p.Publish()
				return
			}
		}
	}
	recv := func(c *Consumer) {
		var h Rec
		for {
			if _, ok, err := c.Peek(&h); err != nil {
				panic(err)
			} else if ok {
				c.Advance(&h)
				c.Publish()
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

// newTestSegment creates a segment of size bytes that t unmaps.
func newTestSegment(t testing.TB, size int) *Segment {
	t.Helper()
	s, fd, err := Create(size)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	t.Cleanup(s.Unmap)
	return s
}

// testRing returns both ends of a ring of size bytes in a fresh segment.
func testRing(t *testing.T, size int) (*Producer, *Consumer) {
	t.Helper()
	s := newTestSegment(t, 4096+size)
	var p Producer
	var c Consumer
	p.Init(s, 0, 4096, size, 0x5eed)
	c.Init(s, 0, 4096, size, 0x5eed)
	return &p, &c
}

// TestRingRewind checks that a producer whose consumer has taken everything
// goes back to the start of the ring once past HotSize (a pad to the end),
// that the consumer follows, and that it does not rewind while records are
// unconsumed.
func TestRingRewind(t *testing.T) {
	p, c := testRing(t, 64<<10)
	put := func(v uint32) {
		t.Helper()
		b := p.Reserve(Size(8))
		if b == nil {
			t.Fatal("ring full")
		}
		PutRec(b, Rec{Size: uint32(len(b)), Kind: 2, Flags: 3, N: 8, Imm: v, Total: 8})
		p.Commit(len(b))
		p.Publish()
	}
	take := func(v uint32) {
		t.Helper()
		var h Rec
		_, ok, err := c.Peek(&h)
		if err != nil || !ok || h.Imm != v {
			t.Fatalf("peek: %v %v imm %d, want %d", err, ok, h.Imm, v)
		}
		c.Advance(&h)
		c.Publish()
	}
	var v uint32
	for p.Tail < HotSize {
		put(v)
		take(v)
		v++
	}
	// Unconsumed: no rewind.
	put(v)
	before := p.Tail
	p.Rewind(atomic.LoadUint64(p.C.Head))
	if p.Tail != before {
		t.Fatalf("rewound over an unconsumed record (tail %d -> %d)", before, p.Tail)
	}
	take(v)
	v++
	p.Rewind(atomic.LoadUint64(p.C.Head))
	if p.Tail&p.mask != 0 {
		t.Fatalf("consumer caught up past HotSize, but the tail stays at offset %d", p.Tail&p.mask)
	}
	for range 3 {
		put(v)
		take(v)
		v++
	}
	if c.Head&c.mask != 3*uint64(Size(8)) {
		t.Fatalf("consumer at offset %d after the rewind, want %d", c.Head&c.mask, 3*Size(8))
	}
}

// TestRingStaleWords: the word where the consumer looks for its next
// record may hold anything an earlier lap left there (nothing clears it):
// even the record's own position, as a payload word, is not a stamp; only
// the position under the ring's key is. Small records take one cache line.
func TestRingStaleWords(t *testing.T) {
	p, c := testRing(t, 4096)
	if p.key == 0 || p.key != c.key {
		t.Fatalf("producer key %#x, consumer key %#x", p.key, c.key)
	}
	var h Rec
	for lap := range 3 {
		for c.Head < uint64(lap+1)*uint64(len(c.Data)) {
			at := c.Head & c.mask
			// What an earlier lap's payload could have left there.
			for _, stale := range []uint64{c.Head, c.Head | stampPad, c.Head ^ 1, 0, ^uint64(0)} {
				binary.NativeEndian.PutUint64(c.Data[at:], stale)
				if _, ok, err := c.Peek(&h); ok || err != nil {
					t.Fatalf("lap %d, position %d: stale word %#x taken for a record (err %v)", lap, c.Head, stale, err)
				}
			}
			b := p.Reserve(Size(8))
			if b == nil {
				t.Fatal("ring full")
			}
			if len(b) != 64 {
				t.Fatalf("an 8-byte message takes %d bytes, want one 64-byte line", len(b))
			}
			PutRec(b, Rec{Size: uint32(len(b)), Kind: 2, Flags: 3, N: 8, Total: 8})
			p.Commit(len(b))
			if _, ok, err := c.Peek(&h); !ok || err != nil {
				t.Fatalf("lap %d, position %d: committed record not found (err %v)", lap, c.Head, err)
			}
			c.Advance(&h)
			c.Publish()
		}
	}
}
