package ring

import (
	"encoding/binary"
	"testing"
)

// FuzzPeek: whatever a peer writes into a ring, the consumer returns records
// that lie inside the ring, or an error; it never panics or loops.
func FuzzPeek(f *testing.F) {
	rec1 := make([]byte, 64)
	PutRec(rec1, Rec{Size: 64, Kind: 2, Flags: 3, N: 16, Total: 16})
	f.Add(rec1, uint64(0))
	pad := make([]byte, 8)
	binary.NativeEndian.PutUint64(pad, 4096-64|stampPad)
	f.Add(pad, uint64(4096-64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2}, uint64(8))
	f.Add([]byte{}, uint64(1<<40))
	s := newTestSegment(f, 4096+4096)
	f.Fuzz(func(t *testing.T, data []byte, head uint64) {
		var r Consumer
		clear(s.Mem)
		r.Init(s, 0, 4096, 4096, 0)
		head &^= 7 | stampPad // the consumer's own position: aligned, and no pad bit
		r.SetHead(head)
		// The data goes where the consumer looks; a record written for
		// position 0 (the first seeds) is stamped with the position.
		at := head & r.mask
		copy(r.Data[at:], data)
		if len(data) >= 8 && binary.NativeEndian.Uint64(data)&^stampPad == 0 {
			binary.NativeEndian.PutUint64(r.Data[at:], head|binary.NativeEndian.Uint64(data)&stampPad)
		}
		var h Rec
		for range 1000 {
			p, ok, err := r.Peek(&h)
			if err != nil || !ok {
				return
			}
			if h.Size < HdrLen || uint64(len(p)) != uint64(h.N) || uint64(h.N) > uint64(h.Size)-HdrLen ||
				(r.Head&r.mask)+uint64(h.Size) > uint64(len(r.Data)) {
				t.Fatalf("record %+v with %d payload bytes at offset %d", h, len(p), r.Head&r.mask)
			}
			r.Advance(&h)
		}
	})
}
