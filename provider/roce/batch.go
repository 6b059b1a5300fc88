package roce

import (
	"errors"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/hook"
	"github.com/goverbs/goverbs/internal/ib"
)

// A burst of packets (a message's, a READ's responses) goes to the socket
// in batches: packets of one size back to back, the last one possibly
// shorter, sent with one system call that the kernel cuts into datagrams
// (UDP GSO). On loopback the batch even reaches a receiver that asked for
// UDP GRO as one datagram; on a NIC it crosses the stack once. IPv4
// datagram i of a batch carries the identification i, which its ICRC
// covers. Where the kernel has no GSO, packets go one by one.
//
// A batch is a list of pieces (an iovec list) that the kernel gathers in
// one sendmsg: a packet with a payload of zcMin bytes or more is its
// headers and its trailer (pad and ICRC) in the batch's buffer, and its
// payload in place, slices of the memory region it is read from, which
// the ICRC is computed over without a copy (the kernel copies it during
// the system call: the region may change once the batch is flushed). A
// smaller packet is copied whole into the buffer. A packet's trailer and
// the next one's headers are adjacent in the buffer: one piece.
const (
	maxBatchBytes = 64000 // within a UDP datagram's 65507 bytes
	maxBatchSegs  = 64    // the kernel's UDP_MAX_SEGMENTS
	maxPacket     = 4096 + 64 + ib.ICRCLen
	maxBatchVec   = 128  // pieces of a batch (the kernel takes up to 1024)
	zcMin         = 1024 // the payload from which a packet's is not copied
)

// batch collects packets for one destination.
type batch struct {
	buf    []byte   // headers and trailers, or whole packets, back to back
	vec    [][]byte // what the batch sends: pieces of buf and payloads in place
	local  int      // where in buf the last piece of vec starts (-1: not in buf)
	size   int      // bytes of the packets in vec
	seg    int      // the size of every packet but the last
	n      int      // packets in the batch
	closed bool     // the last packet is shorter than seg: nothing may follow
	to     netip.Addr
	wait   bool    // wait for room in the socket rather than drop
	src    *sender // the socket it leaves from; nil: port 4791
	sa     sockaddr
	msg    gsoMsg
	crc    ib.Scratch
	one    []byte   // a packet gathered from its pieces, to go alone
	parts  [][]byte // addRef's payload pieces (reused)
	held   []byte   // a packet a wire fault holds back (reorder), with its ICRC
	heldTo netip.Addr
	// pre is a packet (an ACK, with its ICRC) that goes before the batch's
	// packets, in the same system call (sendmmsg) when there are any;
	// preBuf holds it.
	pre    []byte
	preTo  netip.Addr
	preBuf [ib.BTHLen + ib.AETHLen + ib.ICRCLen]byte
	pmsg   preMsg
}

// Wire faults, for tests of the transport's recovery: a function that
// decides the fate of each datagram sent (nil: none, and batches go whole),
// set through hook.RoCEWire.
const (
	faultDrop = hook.WireDrop // lost on the wire
	faultDup  = hook.WireDup  // delivered twice
	faultHold = hook.WireHold // delivered after the next datagram of its sender
)

var faults = &hook.RoCEWire

// errOne stands for a failed send of a batch of one packet (which no GSO
// was asked for).
var errOne = errors.New("roce: send failed")

func newBatch(wait bool) *batch {
	b := &batch{buf: make([]byte, 0, maxBatchBytes+maxPacket), vec: make([][]byte, 0, maxBatchVec), local: -1, wait: wait}
	b.msg.iov = make([]unix.Iovec, maxBatchVec)
	return b
}

// tail is where the next packet is built: its headers and payload, with
// room for its ICRC after them.
func (b *batch) tail() []byte { return b.buf[len(b.buf):len(b.buf)] }

// join makes room for a packet of l bytes (ICRC included) for to, in
// pieces more pieces of vec, flushing what it cannot follow; the packet's
// first h bytes, built at tail, move with the flush. It returns where in
// buf they are.
func (b *batch) join(d *device, to netip.Addr, l, h, pieces int) int {
	start := len(b.buf)
	if b.n > 0 && (to != b.to || b.closed || l > b.seg || b.n == maxBatchSegs || b.size+l > maxBatchBytes ||
		len(b.vec)+pieces > maxBatchVec) {
		b.flush(d)
		copy(b.buf[:h], b.buf[start:start+h])
		start = 0
	}
	if b.n == 0 {
		b.seg, b.to = l, to
	} else if l < b.seg {
		b.closed = true
	}
	return start
}

// appendLocal appends buf[start:end] to vec, as part of the last piece when
// that one ends at start.
func (b *batch) appendLocal(start, end int) {
	if b.local >= 0 && len(b.vec) > 0 {
		b.vec[len(b.vec)-1] = b.buf[b.local:end]
	} else {
		b.local = start
		b.vec = append(b.vec, b.buf[start:end])
	}
	b.buf = b.buf[:end]
}

// add takes the packet of size bytes built at tail (without its ICRC) for
// to, flushing first what it cannot join.
func (b *batch) add(d *device, to netip.Addr, size int) {
	l := size + ib.ICRCLen
	start := b.join(d, to, l, size, 1)
	pkt := b.buf[start : start+l]
	ib.PutICRC(pkt[size:], b.icrc(d, to, pkt[:size], b.n))
	b.appendLocal(start, start+l)
	b.n++
	b.size += l
	b.roomLeft(d)
}

// roomLeft flushes the batch when its buffer has no room for another
// packet to be built at tail.
func (b *batch) roomLeft(d *device) {
	if cap(b.buf)-len(b.buf) < maxPacket {
		b.flush(d)
	}
}

// addRef takes the packet whose h bytes of headers are built at tail and
// whose payload is the n bytes at offset off of segs, which stay where
// they are until the batch is flushed; the pad follows. Below zcMin
// bytes, the payload is copied after the headers (add).
func (b *batch) addRef(d *device, to netip.Addr, h int, segs [][]byte, off, n int) {
	pad := ib.Pad(n)
	if n < zcMin {
		pkt := b.buf[len(b.buf) : len(b.buf)+h+n+pad]
		engine.CopyFrom(pkt[h:h+n], segs, off)
		clear(pkt[h+n:])
		b.add(d, to, len(pkt))
		return
	}
	b.parts = engine.AppendRange(b.parts[:0], segs, off, n)
	pieces := 2 + len(b.parts) // and the headers, the trailer
	size := h + n + pad
	l := size + ib.ICRCLen
	start := b.join(d, to, l, h, pieces)
	hdr := b.buf[start : start+h]
	c := b.startICRC(d, to, size, hdr, b.n)
	b.appendLocal(start, start+h)
	for _, p := range b.parts {
		c = ib.UpdateICRC(c, p)
		b.vec = append(b.vec, p)
		b.local = -1
	}
	t := b.buf[start+h : start+h+pad+ib.ICRCLen]
	clear(t[:pad])
	c = ib.UpdateICRC(c, t[:pad])
	ib.PutICRC(t[pad:], c)
	b.appendLocal(start+h, start+h+len(t))
	b.n++
	b.size += l
	b.roomLeft(d)
}

// icrc is the ICRC of pkt as datagram i of its batch.
func (b *batch) icrc(d *device, to netip.Addr, pkt []byte, i int) uint32 {
	return b.startICRC(d, to, len(pkt), pkt, i)
}

// startICRC starts the ICRC of a packet of n bytes (without its ICRC)
// whose first bytes are hdr, as datagram i of its batch (ib.Start4).
func (b *batch) startICRC(d *device, to netip.Addr, n int, hdr []byte, i int) uint32 {
	sport := uint16(ib.UDPPort)
	if b.src != nil {
		sport = b.src.port
	}
	if d.addr.Is4() && to.Is4() {
		return b.crc.Start4(d.addr.As4(), to.As4(), sport, ib.UDPPort, uint16(i), true, n, hdr)
	}
	return b.crc.Start6(d.addr.As16(), to.As16(), sport, ib.UDPPort, n, hdr)
}

// flush sends what the batch holds.
func (b *batch) flush(d *device) {
	if b.n == 0 {
		b.flushPre(d)
		return
	}
	if b.sa.n == 0 || b.sa.addrPort().Addr() != b.to {
		b.sa.set(netip.AddrPortFrom(b.to, ib.UDPPort))
	}
	fault := faults.Get()
	if fault == nil && len(b.pre) > 0 && b.preTo == b.to && (b.n == 1 || !d.noGSO.Load()) {
		// The ACK and the packets in one system call.
		sent, _ := d.writePre(b)
		if sent > 0 {
			if captureFn.Get() != nil {
				b.captured(d, 0, b.pre)
			}
			d.stats.Sent.Add(1)
			b.pre = nil
		}
		if sent == 2 {
			b.sentGSO(d)
			return
		}
		// (else the ACK alone, if it did not go, waiting for room; and
		// the batch its own way)
	}
	b.flushPre(d)
	if fault == nil && (b.n == 1 || !d.noGSO.Load()) {
		err := d.write(b, nil)
		if b.n == 1 && err != nil {
			err = errOne
		}
		switch err {
		case nil:
			b.sentGSO(d)
			return
		case unix.EINVAL, unix.EIO, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
			d.noGSO.Store(true) // the kernel cannot: one by one from now on
		case errOne:
			d.stats.SendFail.Add(1)
			b.reset()
			return
		default:
			d.stats.SendFail.Add(uint64(b.n))
			b.reset()
			return
		}
	}
	// One by one: each datagram's identification is 0.
	var r vecReader
	for i := 0; i < b.n; i++ {
		pkt := r.next(b, min(b.seg, b.size-r.done))
		l := len(pkt)
		if i > 0 && d.addr.Is4() && b.to.Is4() {
			ib.PutICRC(pkt[l-ib.ICRCLen:], b.icrc(d, b.to, pkt[:l-ib.ICRCLen], 0))
		}
		if fault == nil {
			b.send(d, pkt)
			continue
		}
		switch (*fault)(pkt) {
		case faultDrop:
			d.stats.Sent.Add(1)
		case faultDup:
			b.send(d, pkt)
			b.send(d, pkt)
		case faultHold:
			if b.held == nil {
				b.held, b.heldTo = append([]byte(nil), pkt...), b.to
				continue
			}
			b.send(d, pkt)
		default:
			b.send(d, pkt)
		}
		if b.held != nil && b.heldTo == b.to {
			b.send(d, b.held)
			b.held = nil
		}
	}
	b.reset()
}

// sentGSO accounts for the batch sent whole, and empties it.
func (b *batch) sentGSO(d *device) {
	if captureFn.Get() != nil {
		var r vecReader
		for i := 0; i < b.n; i++ {
			b.captured(d, uint16(i), r.next(b, min(b.seg, b.size-r.done)))
		}
	}
	d.stats.Sent.Add(uint64(b.n))
	b.reset()
}

// flushPre sends the packet ahead of the batch (pre) alone, if there is one.
func (b *batch) flushPre(d *device) {
	if len(b.pre) == 0 {
		return
	}
	var sa sockaddr
	sa.set(netip.AddrPortFrom(b.preTo, ib.UDPPort))
	pre := b.pre
	b.pre = nil
	if captureFn.Get() != nil {
		sport := uint16(ib.UDPPort)
		if b.src != nil {
			sport = b.src.port
		}
		d.captured(netip.AddrPortFrom(d.addr, sport), netip.AddrPortFrom(b.preTo, ib.UDPPort), 0, pre)
	}
	s := b.src
	if s == nil {
		s = &d.tx
	}
	s.Lock()
	err := s.write(nil, pre, &sa, true) // an ACK waits for room (as flushACKs')
	s.Unlock()
	if err != nil {
		d.stats.SendFail.Add(1)
		return
	}
	d.stats.Writes.Add(1)
	d.stats.Sent.Add(1)
}

// vecReader reads a batch's packets from its pieces.
type vecReader struct {
	i, off int // the piece, and the offset in it, read next
	done   int // bytes read
}

// next returns the next n bytes of b's pieces: in place when one piece
// holds them (a packet copied whole into buf), else gathered into b.one.
func (r *vecReader) next(b *batch, n int) []byte {
	r.done += n
	if p := b.vec[r.i][r.off:]; len(p) >= n {
		r.off += n
		if r.off == len(b.vec[r.i]) {
			r.i, r.off = r.i+1, 0
		}
		return p[:n]
	}
	if b.one == nil {
		b.one = make([]byte, maxPacket)
	}
	out := b.one[:n]
	for k := 0; k < n; {
		c := copy(out[k:], b.vec[r.i][r.off:])
		k += c
		r.off += c
		if r.off == len(b.vec[r.i]) {
			r.i, r.off = r.i+1, 0
		}
	}
	return out
}

// captured shows packet pkt, datagram id of the batch, to the capture.
func (b *batch) captured(d *device, id uint16, pkt []byte) {
	sport := uint16(ib.UDPPort)
	if b.src != nil {
		sport = b.src.port
	}
	d.captured(netip.AddrPortFrom(d.addr, sport), netip.AddrPortFrom(b.to, ib.UDPPort), id, pkt)
}

// send sends one packet of the batch.
func (b *batch) send(d *device, pkt []byte) {
	if captureFn.Get() != nil {
		b.captured(d, 0, pkt)
	}
	if err := d.write(b, pkt); err != nil {
		d.stats.SendFail.Add(1)
	} else {
		d.stats.Sent.Add(1)
	}
}

func (b *batch) reset() {
	clear(b.vec) // let go of the memory regions
	b.buf, b.vec, b.local, b.size, b.n, b.seg, b.closed = b.buf[:0], b.vec[:0], -1, 0, 0, 0, false
}
