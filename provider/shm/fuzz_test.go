package shm

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
)

// FuzzPeek: whatever a peer writes into a ring and its tail, the consumer
// returns records that lie inside the ring, or an error; it never panics.
func FuzzPeek(f *testing.F) {
	rec1 := make([]byte, 64)
	putRec(rec1, &rec{size: 48, kind: recSend, flags: fFirst | fLast, n: 16, total: 16})
	f.Add(rec1, uint64(48))
	pad := make([]byte, 16)
	binary.LittleEndian.PutUint32(pad, 16)
	pad[4] = recPad
	f.Add(pad, uint64(16))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2}, uint64(8))
	f.Add([]byte{}, uint64(1<<40))
	l := layout{reqSize: 4096, respSize: 4096, slots: 8}
	s, fd, err := newSegment(l)
	if err != nil {
		f.Fatal(err)
	}
	closeFds([]int{fd})
	f.Cleanup(s.unmap)
	f.Fuzz(func(t *testing.T, data []byte, tail uint64) {
		var r consRing
		clear(s.mem)
		r.init(s, ctlReq, l.reqOff(), l.reqSize)
		copy(r.data, data)
		atomic.StoreUint64(r.c.tail, tail)
		var h rec
		for range 1000 {
			p, ok, err := r.peek(&h)
			if err != nil || !ok {
				return
			}
			if h.size < recHdr || uint64(len(p)) != uint64(h.n) || uint64(h.n) > uint64(h.size)-recHdr {
				t.Fatalf("record %+v with %d payload bytes", h, len(p))
			}
			r.advance(&h)
			if r.head > r.tail {
				t.Fatalf("head %d past tail %d", r.head, r.tail)
			}
		}
	})
}
