package capture

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/internal/ib"
)

// A pcapng file (draft-ietf-opsawg-pcapng): a section header, one
// interface of link type RAW (each packet an IPv4 datagram), and an
// enhanced packet block per packet, with microsecond timestamps.
const (
	blockSHB    = 0x0A0D0D0A
	blockIDB    = 0x00000001
	blockEPB    = 0x00000006
	byteOrder   = 0x1A2B3C4D
	linkTypeRaw = 101
)

// pcapWriter writes packets; its caller serializes the calls.
type pcapWriter struct {
	w   *bufio.Writer
	err error
	pkt []byte // an IPv4/UDP datagram being built
}

func newPcapWriter(w io.Writer) *pcapWriter {
	p := &pcapWriter{w: bufio.NewWriterSize(w, 1<<16)}
	le := binary.LittleEndian
	shb := make([]byte, 28)
	le.PutUint32(shb[0:], blockSHB)
	le.PutUint32(shb[4:], 28)
	le.PutUint32(shb[8:], byteOrder)
	le.PutUint16(shb[12:], 1) // version 1.0
	le.PutUint64(shb[16:], ^uint64(0))
	le.PutUint32(shb[24:], 28)
	idb := make([]byte, 20)
	le.PutUint32(idb[0:], blockIDB)
	le.PutUint32(idb[4:], 20)
	le.PutUint16(idb[8:], linkTypeRaw)
	le.PutUint32(idb[12:], 0) // no snapshot limit
	le.PutUint32(idb[16:], 20)
	p.write(shb)
	p.write(idb)
	return p
}

func (p *pcapWriter) write(b []byte) {
	if p.err == nil {
		_, p.err = p.w.Write(b)
	}
}

// udp writes the RoCE packet pkt (BTH to ICRC) as an IPv4/UDP datagram
// from src to dst with IP identification id.
func (p *pcapWriter) udp(t time.Time, src, dst netip.AddrPort, id uint16, pkt []byte) {
	n := 20 + 8 + len(pkt)
	b := append(p.pkt[:0], make([]byte, 28)...)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	binary.BigEndian.PutUint16(b[4:], id)
	b[6] = 0x40 // don't fragment
	b[8] = 64
	b[9] = 17
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:16], s4[:])
	copy(b[16:20], d4[:])
	binary.BigEndian.PutUint16(b[10:], ipChecksum(b[:20]))
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(pkt)))
	// UDP checksum 0: none, as IPv4 allows (RoCEv2 NICs send it so too).
	b = append(b, pkt...)
	p.pkt = b
	p.packet(t, b)
}

// tcp writes an IPv4 TCP segment (no options, checksums computed).
func (p *pcapWriter) tcp(t time.Time, src, dst netip.AddrPort, seq, ack uint32, flags byte, payload []byte) {
	n := 20 + 20 + len(payload)
	b := append(p.pkt[:0], make([]byte, 40)...)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	b[6] = 0x40 // don't fragment
	b[8] = 64
	b[9] = 6
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:16], s4[:])
	copy(b[16:20], d4[:])
	binary.BigEndian.PutUint16(b[10:], ipChecksum(b[:20]))
	h := b[20:]
	binary.BigEndian.PutUint16(h[0:], src.Port())
	binary.BigEndian.PutUint16(h[2:], dst.Port())
	binary.BigEndian.PutUint32(h[4:], seq)
	binary.BigEndian.PutUint32(h[8:], ack)
	h[12] = 5 << 4
	h[13] = flags
	binary.BigEndian.PutUint16(h[14:], 0xFFFF)
	b = append(b, payload...)
	// The checksum covers a pseudo-header of the addresses, protocol and
	// length, then the segment.
	var ph [12]byte
	copy(ph[0:4], s4[:])
	copy(ph[4:8], d4[:])
	ph[9] = 6
	binary.BigEndian.PutUint16(ph[10:], uint16(n-20))
	binary.BigEndian.PutUint16(b[36:], ^fold(sum16(ph[:])+sum16(b[20:])))
	p.pkt = b
	p.packet(t, b)
}

// packet writes one enhanced packet block.
func (p *pcapWriter) packet(t time.Time, data []byte) {
	le := binary.LittleEndian
	pad := -len(data) & 3
	total := 32 + len(data) + pad
	var h [28]byte
	le.PutUint32(h[0:], blockEPB)
	le.PutUint32(h[4:], uint32(total))
	le.PutUint32(h[8:], 0) // interface 0
	us := uint64(t.UnixMicro())
	le.PutUint32(h[12:], uint32(us>>32))
	le.PutUint32(h[16:], uint32(us))
	le.PutUint32(h[20:], uint32(len(data)))
	le.PutUint32(h[24:], uint32(len(data)))
	p.write(h[:])
	p.write(data)
	var tail [8]byte
	le.PutUint32(tail[pad:], uint32(total))
	p.write(tail[:pad+4])
}

func (p *pcapWriter) flush() error {
	if p.err == nil {
		p.err = p.w.Flush()
	}
	return p.err
}

func ipChecksum(h []byte) uint16 { return ^fold(sum16(h)) }

// sum16 adds b as big-endian 16-bit words (an odd last byte padded with 0).
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)&1 != 0 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

// fold folds a sum of 16-bit words into one's complement 16 bits.
func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// icrc completes a synthesized RoCE packet with its ICRC.
func icrc(src, dst netip.AddrPort, body []byte) []byte {
	c := ib.ICRCv4(src.Addr().As4(), dst.Addr().As4(), src.Port(), dst.Port(), 0, true, body)
	return binary.LittleEndian.AppendUint32(body, c)
}
