package capture

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/provider/iwarp"
)

// iWARP connections are recorded as their TCP byte stream, as it is on the
// wire, cut into one TCP segment per MPA frame or FPDU (Wireshark's MPA
// dissector reads an FPDU only from the start of a segment; goverbs and
// siw size FPDUs to the MSS for the same reason), with a synthesized
// handshake when a stream is first seen and a FIN when a goverbs end
// closes. When both ends are in this process each byte is reported twice
// (sent by one, read by the other): the first end to report a direction
// owns it and the other's reports of it are dropped.

// streamKey names a connection by its two ends, the lower one first.
type streamKey [2]netip.AddrPort

func keyOf(a, b netip.AddrPort) streamKey {
	if b.Compare(a) < 0 {
		a, b = b, a
	}
	return streamKey{a, b}
}

const (
	ownNone = iota
	ownSent
	ownRead
)

type tcpDir struct {
	src, dst netip.AddrPort
	next     uint32 // sequence number of the next byte
	owner    int
	framed   bool   // the MPA frame has gone by: FPDUs follow
	pend     []byte // bytes of a frame not complete yet
	fin      bool
}

type tcpStream struct{ dir [2]tcpDir }

// maxSegment is the most payload one IPv4 packet of the file can carry
// (IPv4's total length is 16 bits).
const maxSegment = 65535 - 20 - 20

// maxClosed bounds the streams kept after a goverbs end closed them (the
// other end may be another process whose FIN is never seen).
const maxClosed = 1024

// stream records bytes of an iWARP connection's stream (b nil: src closed).
func (r *Recorder) stream(src, dst netip.AddrPort, sent bool, qpn uint32, b [][]byte) {
	if !src.Addr().Is4() || !dst.Addr().Is4() || !r.wants(iwarp.DeviceName, qpn) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	now := time.Now()
	key := keyOf(src, dst)
	s := r.streams[key]
	if s != nil && b != nil && (s.dir[0].src == src && s.dir[0].fin || s.dir[1].src == src && s.dir[1].fin) {
		s = nil // bytes after a FIN: a new connection on the same ports
	}
	if s == nil {
		if b == nil {
			return
		}
		s = &tcpStream{}
		s.dir[0] = tcpDir{src: src, dst: dst, next: isn(src, dst)}
		s.dir[1] = tcpDir{src: dst, dst: src, next: isn(dst, src)}
		r.streams[key] = s
		// The handshake, the first speaker (an MPA initiator) as client.
		r.tcp(now, &s.dir[0], s.dir[1].next, tcpSYN, nil)
		r.tcp(now, &s.dir[1], s.dir[0].next, tcpSYN|tcpACK, nil)
		r.tcp(now, &s.dir[0], s.dir[1].next, tcpACK, nil)
	}
	d, o := &s.dir[0], &s.dir[1]
	if d.src != src {
		d, o = o, d
	}
	own := ownRead
	if sent {
		own = ownSent
	}
	if d.owner == ownNone {
		d.owner = own
	}
	if d.owner != own || d.fin {
		return
	}
	if b == nil {
		r.tcp(now, d, o.next, tcpFIN|tcpACK, nil)
		d.fin = true
		if o.fin {
			delete(r.streams, key)
		} else {
			r.closed = append(r.closed, key)
		}
		for len(r.closed) > maxClosed {
			// Only a stream still half closed: the ports may have been
			// reused by a new connection meanwhile.
			if s := r.streams[r.closed[0]]; s != nil && (s.dir[0].fin || s.dir[1].fin) {
				delete(r.streams, r.closed[0])
			}
			r.closed = r.closed[1:]
		}
		return
	}
	for _, p := range b {
		d.pend = append(d.pend, p...)
	}
	for {
		n := frameLen(d.pend, d.framed)
		if n == 0 || n > len(d.pend) {
			break
		}
		d.framed = true
		for f := d.pend[:n]; len(f) > 0; {
			k := min(len(f), maxSegment)
			r.tcp(now, d, o.next, tcpPSH|tcpACK, f[:k])
			f = f[k:]
		}
		d.pend = d.pend[:copy(d.pend, d.pend[n:])]
	}
	if r.each {
		r.p.flush()
	}
}

// frameLen is the length of the frame at the start of b: an MPA Request or
// Reply before the first FPDU, then FPDUs. 0: not enough bytes to tell.
func frameLen(b []byte, framed bool) int {
	if !framed && len(b) >= wire.MPAHeaderLen &&
		(string(b[:16]) == wire.MPAKeyRequest || string(b[:16]) == wire.MPAKeyReply) {
		return wire.MPAHeaderLen + int(binary.BigEndian.Uint16(b[18:]))
	}
	if len(b) < wire.MPALenLen {
		return 0
	}
	if !framed && len(b) < wire.MPAHeaderLen && len(b) < wire.FPDULen(int(binary.BigEndian.Uint16(b))) {
		return 0 // could still become an MPA frame
	}
	return wire.FPDULen(int(binary.BigEndian.Uint16(b)))
}

// isn is a direction's initial sequence number: any fixed value does.
func isn(src, dst netip.AddrPort) uint32 {
	return uint32(src.Port())<<16 ^ uint32(dst.Port()) ^ 0x1000_0000
}

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpPSH = 0x08
	tcpACK = 0x10
)

// tcp writes one segment of direction d and advances its sequence number.
func (r *Recorder) tcp(t time.Time, d *tcpDir, ack uint32, flags byte, payload []byte) {
	if flags&tcpACK == 0 {
		ack = 0
	}
	r.p.tcp(t, d.src, d.dst, d.next, ack, flags, payload)
	r.packets.Add(1)
	d.next += uint32(len(payload))
	if flags&(tcpSYN|tcpFIN) != 0 {
		d.next++
	}
}
