package ib

import (
	"encoding/binary"
	"hash/crc32"
	"sync"
)

// The ICRC (IBA annex A17.3.3) is a CRC-32 (IEEE, as hash/crc32's) over
// the packet with the fields that routers may change replaced by ones: 8
// bytes standing for the LRH, the IP header with its traffic class, TTL or
// hop limit, flow label and header checksum masked, the UDP header with
// its checksum masked, the BTH with its byte 4 (FECN, BECN, reserved)
// masked, and everything after, the pad included. It travels as 4
// little-endian bytes after the pad.

var ones8 = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// Scratch is room for the masked headers of an ICRC computation. The
// functions that take one allocate nothing; the others allocate it (the
// CRC's assembly lets it escape).
//
// It also remembers the CRC of the masked headers before the BTH (36
// bytes over IPv4, 56 over IPv6) of the last packets: a stream of packets
// of one length between two ports has the same ones (over IPv4, one per
// identification: a GSO batch's datagrams have 0, 1, 2, ...). Bytes that
// few go through hash/crc32's table code, not its CLMUL code, at several
// times the cost per byte; their CRC was a quarter of the ICRC's time.
// Over IPv4 the fields they are made of are the key, so that a packet
// that hits builds nothing; and the CRC through the BTH's first 8 bytes
// (opcode to destination QP, which a stream repeats) is remembered after
// them, so that a packet's headers cost the table code 4 bytes (AckReq
// and PSN) and whatever follows the BTH.
type Scratch struct {
	h   [8 + 40 + 8 + BTHLen]byte
	pre [16]prefix // by identification, modulo 16
	// The basis CheckV4 used last, and its packet length: a peer whose IP
	// identification is not 0 (rxe's) sends most packets at one length,
	// so the shared table's lock is taken once per length, not per packet.
	bn int
	b  *basis
}

type prefix struct {
	n   int // bytes (0: none)
	b   [8 + 40 + 8]byte
	crc uint32
	k4  key4 // the IPv4 fields b was made of, when k4.ok

	bth   [8]byte // the BTH's first 8 bytes (byte 4 masked) last seen after b
	bthOK bool
	bcrc  uint32 // the CRC through them
}

// key4 is what the masked headers before the BTH are made of over IPv4.
type key4 struct {
	src, dst         [4]byte
	sport, dport, id uint16
	n                int
	df, ok           bool
}

// ICRCv4 returns the ICRC of pkt (BTH through pad, without the ICRC) sent
// over IPv4 from src:sport to dst:dport with IP identification id and
// flags df (don't fragment).
func ICRCv4(src, dst [4]byte, sport, dport uint16, id uint16, df bool, pkt []byte) uint32 {
	h := new([8 + 40 + 8 + BTHLen]byte)
	return finish(head4(h[:], src, dst, sport, dport, id, df, len(pkt)), pkt)
}

// V4 is ICRCv4 in s.
func (s *Scratch) V4(src, dst [4]byte, sport, dport uint16, id uint16, df bool, pkt []byte) uint32 {
	return s.start4(src, dst, sport, dport, id, df, len(pkt), pkt)
}

// Start4 starts the ICRC of a packet of n bytes (BTH through pad, without
// the ICRC) over IPv4, as V4 does, whose first bytes (the BTH at least)
// are hdr; the rest of the packet follows with UpdateICRC, in order. It
// lets a sender compute the ICRC of a packet whose payload stays where it
// is (in a memory region) rather than be copied after its headers.
func (s *Scratch) Start4(src, dst [4]byte, sport, dport uint16, id uint16, df bool, n int, hdr []byte) uint32 {
	return s.start4(src, dst, sport, dport, id, df, n, hdr)
}

// start4 is Start4: the masked headers are built only when the
// remembered ones are of other fields.
func (s *Scratch) start4(src, dst [4]byte, sport, dport uint16, id uint16, df bool, n int, hdr []byte) uint32 {
	p := &s.pre[id%uint16(len(s.pre))]
	k := key4{src: src, dst: dst, sport: sport, dport: dport, id: id, n: n, df: df, ok: true}
	if p.k4 != k {
		h := head4(s.h[:], src, dst, sport, dport, id, df, n)
		p.set(h[:len(h)-BTHLen])
		p.k4 = k
	}
	return p.rest(hdr)
}

// Start6 is Start4 over IPv6.
func (s *Scratch) Start6(src, dst [16]byte, sport, dport uint16, n int, hdr []byte) uint32 {
	return s.finish(head6(s.h[:], src, dst, sport, dport, n), 0, hdr)
}

// UpdateICRC continues ICRC c (from Start4 or Start6) over the packet's
// next bytes b.
func UpdateICRC(c uint32, b []byte) uint32 {
	if len(b) == 0 {
		return c // (a packet without pad: hash/crc32's dispatch for nothing)
	}
	return crc32.Update(c, crc32.IEEETable, b)
}

// head4 writes into h the masked headers of a packet of n bytes over IPv4
// and returns them, with room for the BTH last.
func head4(h []byte, src, dst [4]byte, sport, dport uint16, id uint16, df bool, n int) []byte {
	h = h[:8+20+8+BTHLen]
	clear(h)
	copy(h[:8], ones8[:])
	ip := h[8:28]
	ip[0] = 0x45
	ip[1] = 0xFF // TOS
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+n+ICRCLen))
	binary.BigEndian.PutUint16(ip[4:], id)
	if df {
		ip[6] = 0x40
	}
	ip[8] = 0xFF // TTL
	ip[9] = 17   // UDP
	ip[10], ip[11] = 0xFF, 0xFF
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	putUDP(h[28:36], sport, dport, n)
	return h
}

// ICRCv6 is ICRCv4 over IPv6.
func ICRCv6(src, dst [16]byte, sport, dport uint16, pkt []byte) uint32 {
	h := new([8 + 40 + 8 + BTHLen]byte)
	return finish(head6(h[:], src, dst, sport, dport, len(pkt)), pkt)
}

// V6 is ICRCv6 in s.
func (s *Scratch) V6(src, dst [16]byte, sport, dport uint16, pkt []byte) uint32 {
	return s.finish(head6(s.h[:], src, dst, sport, dport, len(pkt)), 0, pkt)
}

// head6 is head4 over IPv6.
func head6(h []byte, src, dst [16]byte, sport, dport uint16, n int) []byte {
	h = h[:8+40+8+BTHLen]
	clear(h)
	copy(h[:8], ones8[:])
	ip := h[8:48]
	// Version 6; traffic class and flow label masked.
	binary.BigEndian.PutUint32(ip, 0x6FFFFFFF)
	binary.BigEndian.PutUint16(ip[4:], uint16(8+n+ICRCLen))
	ip[6] = 17   // UDP
	ip[7] = 0xFF // hop limit
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	putUDP(h[48:56], sport, dport, n)
	return h
}

func putUDP(u []byte, sport, dport uint16, n int) {
	binary.BigEndian.PutUint16(u, sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+n+ICRCLen))
	u[6], u[7] = 0xFF, 0xFF // checksum
}

// finish adds the BTH (byte 4 masked) and the rest of pkt to the header
// bytes h, whose last BTHLen bytes are room for the BTH; the CRC of the
// bytes before them comes from s.pre[id%16] when they are the same.
func (s *Scratch) finish(h []byte, id uint16, pkt []byte) uint32 {
	n := len(h) - BTHLen
	p := &s.pre[id%uint16(len(s.pre))]
	if p.n != n || string(p.b[:n]) != string(h[:n]) {
		p.set(h[:n])
	}
	return p.rest(pkt)
}

// set makes b the remembered masked headers before the BTH.
func (p *prefix) set(b []byte) {
	p.n = len(b)
	copy(p.b[:], b)
	p.crc = crc32.ChecksumIEEE(b)
	p.k4 = key4{}
	p.bthOK = false
}

// rest continues the CRC of the remembered headers over pkt, which
// starts with the BTH (its byte 4 masked).
func (p *prefix) rest(pkt []byte) uint32 {
	var m [8]byte
	copy(m[:], pkt[:8])
	m[4] = 0xFF
	if !p.bthOK || m != p.bth {
		p.bth, p.bthOK = m, true
		p.bcrc = crc32.Update(p.crc, crc32.IEEETable, p.bth[:]) // (m would escape)
	}
	// AckReq and the PSN: the table, bytewise (hash/crc32's Update on 4
	// bytes costs its dispatch more than the work).
	c := ^p.bcrc
	for _, v := range pkt[8:BTHLen] {
		c = crc32.IEEETable[byte(c)^v] ^ c>>8
	}
	return UpdateICRC(^c, pkt[BTHLen:])
}

// finish is Scratch.finish without the remembered CRCs.
func finish(h, pkt []byte) uint32 {
	b := h[len(h)-BTHLen:]
	copy(b, pkt[:BTHLen])
	b[4] = 0xFF
	c := crc32.ChecksumIEEE(h)
	return crc32.Update(c, crc32.IEEETable, pkt[BTHLen:])
}

// PutICRC writes c as the packet's trailer.
func PutICRC(b []byte, c uint32) { binary.LittleEndian.PutUint32(b, c) }

// GetICRC reads the trailer.
func GetICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// A UDP socket shows a received packet's addresses, ports and length, but
// not its IPv4 identification and flags, which the ICRC covers: senders
// choose them (Linux rxe a hashed identification, with DF). CheckICRCv4
// checks every other bit of the ICRC: the CRC is affine, so the 17
// unknown bits (the identification and DF) change it by a combination of
// 17 fixed vectors for a given length, and the packet is good exactly when
// the difference between the received ICRC and the one computed with those
// bits clear is such a combination. (The IP header checksum, which the
// kernel verified, covers the two fields.)

// CheckICRCv4 reports whether icrc is the ICRC of pkt received over IPv4
// from src:sport at dst:dport, for some IP identification and DF flag.
func CheckICRCv4(src, dst [4]byte, sport, dport uint16, pkt []byte, icrc uint32) bool {
	return new(Scratch).CheckV4(src, dst, sport, dport, pkt, icrc)
}

// CheckV4 is CheckICRCv4 in s.
func (s *Scratch) CheckV4(src, dst [4]byte, sport, dport uint16, pkt []byte, icrc uint32) bool {
	base := s.V4(src, dst, sport, dport, 0, false, pkt)
	d := base ^ icrc
	if d == 0 {
		return true
	}
	if s.b == nil || s.bn != len(pkt) {
		s.b, s.bn = unknowns(len(pkt)), len(pkt)
	}
	return solvable(s.b, d)
}

// basis is, for one packet length, an echelon form of the 17 vectors by
// which the identification and DF bits change the ICRC.
type basis struct {
	rows []uint32 // each with a distinct leading bit
}

var bases struct {
	sync.Mutex
	m map[int]*basis
}

// unknowns returns the basis for packets of n bytes (BTH through pad).
func unknowns(n int) *basis {
	bases.Lock()
	defer bases.Unlock()
	if b := bases.m[n]; b != nil {
		return b
	}
	if bases.m == nil || len(bases.m) > 1<<12 {
		bases.m = map[int]*basis{}
	}
	var zero [4]byte
	pkt := make([]byte, n)
	z := ICRCv4(zero, zero, 0, 0, 0, false, pkt)
	b := &basis{}
	add := func(v uint32) {
		for _, r := range b.rows {
			if v^r < v {
				v ^= r
			}
		}
		if v != 0 {
			b.rows = append(b.rows, v)
			// keep rows reducing each other: sorted by leading bit, high first
			for i := len(b.rows) - 1; i > 0 && b.rows[i] > b.rows[i-1]; i-- {
				b.rows[i], b.rows[i-1] = b.rows[i-1], b.rows[i]
			}
		}
	}
	for bit := range 16 {
		add(ICRCv4(zero, zero, 0, 0, 1<<bit, false, pkt) ^ z)
	}
	add(ICRCv4(zero, zero, 0, 0, 0, true, pkt) ^ z)
	bases.m[n] = b
	return b
}

// solvable reports whether v is a combination of b's rows.
func solvable(b *basis, v uint32) bool {
	for _, r := range b.rows {
		if v^r < v {
			v ^= r
		}
	}
	return v == 0
}
