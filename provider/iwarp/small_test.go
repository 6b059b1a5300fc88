package iwarp

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/internal/wire"
)

// TestBuildSmallSameWire: a message small enough for build's one-piece
// layout (buildSmall) puts on the wire, byte for byte, what the general
// layout (buildFPDUs) puts there: Sends and Writes of 0 to copySmall bytes,
// from one or several pieces of memory, with and without MPA CRC.
func TestBuildSmallSameWire(t *testing.T) {
	src := make([]byte, copySmall)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	for _, crc := range []bool{false, true} {
		for n := 0; n <= copySmall; n++ {
			for _, cut := range [][]int{{n}, {n / 2, n - n/2}, {1, 0, n - 1}} {
				if n == 0 && len(cut) > 1 {
					continue
				}
				var segs [][]byte
				off := 0
				for _, k := range cut {
					segs = append(segs, src[off:off+k])
					off += k
				}
				for _, tagged := range []bool{false, true} {
					hl, put := wire.UntaggedHeaderLen, func(h []byte, off, plen int, last bool) {
						wire.PutUntagged(h, wire.OpSend, last, 0, wire.QNSend, 7, uint32(off), wire.UntaggedHeaderLen-wire.MPALenLen+plen)
					}
					if tagged {
						hl, put = wire.TaggedHeaderLen, func(h []byte, off, plen int, last bool) {
							wire.PutTagged(h, wire.OpWrite, last, 0x1234, 0x10000+uint64(off), wire.TaggedHeaderLen-wire.MPALenLen+plen)
						}
					}
					c := &conn{crc: crc}
					c.tx.maxFPDU = 1448
					if !(n <= c.payloadMax(hl)) {
						t.Fatalf("payloadMax %d < %d", c.payloadMax(hl), n)
					}
					small := c.build(nil, hl, segs, n, put)
					if len(small) != 1 {
						t.Fatalf("n=%d: build laid out %d pieces, want the one of buildSmall", n, len(small))
					}
					got := bytes.Join(small, nil)
					g := &conn{crc: crc}
					g.tx.maxFPDU = 1448
					want := bytes.Join(g.buildFPDUs(nil, hl, segs, n, g.payloadMax(hl), put), nil)
					if !bytes.Equal(got, want) {
						t.Fatalf("crc=%v n=%d cut=%v tagged=%v:\n got %x\nwant %x", crc, n, cut, tagged, got, want)
					}
					if crc {
						// The CRC is right, not merely the same: it covers
						// header, payload and pad.
						var k wire.CRC
						k.Update(want[:len(want)-wire.CRCLen])
						if k.Sum() != wire.TrailerCRC(want[len(want)-wire.CRCLen:]) {
							t.Fatalf("n=%d: CRC of the general layout does not check", n)
						}
					}
				}
			}
		}
	}
}
