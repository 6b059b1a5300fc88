package shm

import (
	"encoding/binary"
	"testing"
)

// FuzzPeek: whatever a peer writes into a ring, the consumer returns records
// that lie inside the ring, or an error; it never panics or loops.
func FuzzPeek(f *testing.F) {
	rec1 := make([]byte, 64)
	putRec(rec1, rec{size: 64, kind: recSend, flags: fFirst | fLast, n: 16, total: 16})
	f.Add(rec1, uint64(0))
	pad := make([]byte, 8)
	binary.NativeEndian.PutUint64(pad, 4096-64|stampPad)
	f.Add(pad, uint64(4096-64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2}, uint64(8))
	f.Add([]byte{}, uint64(1<<40))
	l := layout{reqSize: 4096, respSize: 4096, slots: 8}
	s, fd, err := newSegment(l)
	if err != nil {
		f.Fatal(err)
	}
	closeFds([]int{fd})
	f.Cleanup(s.unmap)
	f.Fuzz(func(t *testing.T, data []byte, head uint64) {
		var r consRing
		clear(s.mem)
		r.init(s, ctlReq, l.reqOff(), l.reqSize)
		head &^= 7 | stampPad // the consumer's own position: aligned, and no pad bit
		r.head = head
		r.next.Store(head)
		// The data goes where the consumer looks; a record written for
		// position 0 (the first seeds) is stamped with the position.
		at := head & r.mask
		copy(r.data[at:], data)
		if len(data) >= 8 && binary.NativeEndian.Uint64(data)&^stampPad == 0 {
			binary.NativeEndian.PutUint64(r.data[at:], head|binary.NativeEndian.Uint64(data)&stampPad)
		}
		var h rec
		for range 1000 {
			p, ok, err := r.peek(&h)
			if err != nil || !ok {
				return
			}
			if h.size < recHdr || uint64(len(p)) != uint64(h.n) || uint64(h.n) > uint64(h.size)-recHdr ||
				(r.head&r.mask)+uint64(h.size) > uint64(len(r.data)) {
				t.Fatalf("record %+v with %d payload bytes at offset %d", h, len(p), r.head&r.mask)
			}
			r.advance(&h)
		}
	})
}
