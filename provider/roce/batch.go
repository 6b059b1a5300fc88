package roce

import (
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/ib"
)

// A burst of packets (a message's, a READ's responses) goes to the socket
// in batches: packets of one size back to back, the last one possibly
// shorter, sent with one system call that the kernel cuts into datagrams
// (UDP GSO). On loopback the batch even reaches a receiver that asked for
// UDP GRO as one datagram; on a NIC it crosses the stack once. IPv4
// datagram i of a batch carries the identification i, which its ICRC
// covers. Where the kernel has no GSO, packets go one by one.
const (
	maxBatchBytes = 64000 // within a UDP datagram's 65507 bytes
	maxBatchSegs  = 64    // the kernel's UDP_MAX_SEGMENTS
	maxPacket     = 4096 + 64 + ib.ICRCLen
)

// batch collects packets for one destination.
type batch struct {
	buf    []byte // packets with their ICRCs, back to back
	seg    int    // the size of every packet but the last
	n      int    // packets in buf
	closed bool   // the last packet is shorter than seg: nothing may follow
	to     netip.Addr
	wait   bool    // wait for room in the socket rather than drop
	src    *sender // the socket it leaves from; nil: port 4791
	sa     sockaddr
	msg    gsoMsg
	crc    ib.Scratch
	held   []byte // a packet a wire fault holds back (reorder), with its ICRC
	heldTo netip.Addr
}

// Wire faults, for tests of the transport's recovery: a function that
// decides the fate of each datagram sent (nil: none, and batches go whole).
type wireFault func(pkt []byte) faultKind

type faultKind int

const (
	faultPass faultKind = iota
	faultDrop           // lost on the wire
	faultDup            // delivered twice
	faultHold           // delivered after the next datagram of its sender
)

var faults atomic.Pointer[wireFault]

func newBatch(wait bool) *batch {
	return &batch{buf: make([]byte, 0, maxBatchBytes+maxPacket), wait: wait}
}

// tail is where the next packet is built: its headers and payload, with
// room for its ICRC after them.
func (b *batch) tail() []byte { return b.buf[len(b.buf):len(b.buf)] }

// add takes the packet of size bytes built at tail (without its ICRC) for
// to, flushing first what it cannot join.
func (b *batch) add(d *device, to netip.Addr, size int) {
	start := len(b.buf)
	l := size + ib.ICRCLen
	if b.n > 0 && (to != b.to || b.closed || l > b.seg || b.n == maxBatchSegs || start+l > maxBatchBytes) {
		b.buf = b.buf[:start]
		b.flush(d)
		copy(b.buf[:size], b.buf[start:start+size])
		start = 0
	}
	pkt := b.buf[start : start+l]
	ib.PutICRC(pkt[size:], b.icrc(d, to, pkt[:size], b.n))
	if b.n == 0 {
		b.seg, b.to = l, to
	} else if l < b.seg {
		b.closed = true
	}
	b.n++
	b.buf = b.buf[:start+l]
	if cap(b.buf)-len(b.buf) < maxPacket {
		b.flush(d)
	}
}

// icrc is the ICRC of pkt as datagram i of its batch.
func (b *batch) icrc(d *device, to netip.Addr, pkt []byte, i int) uint32 {
	sport := uint16(ib.UDPPort)
	if b.src != nil {
		sport = b.src.port
	}
	if d.addr.Is4() && to.Is4() {
		return b.crc.V4(d.addr.As4(), to.As4(), sport, ib.UDPPort, uint16(i), true, pkt)
	}
	return b.crc.V6(d.addr.As16(), to.As16(), sport, ib.UDPPort, pkt)
}

// flush sends what the batch holds.
func (b *batch) flush(d *device) {
	if b.n == 0 {
		return
	}
	if b.sa.n == 0 || b.sa.addrPort().Addr() != b.to {
		b.sa.set(netip.AddrPortFrom(b.to, ib.UDPPort))
	}
	fault := faults.Load()
	if b.n > 1 && !d.noGSO.Load() && fault == nil {
		err := d.write(b, nil)
		switch err {
		case nil:
			if captureFn.Load() != nil {
				for i, off := 0, 0; i < b.n; i++ {
					l := min(b.seg, len(b.buf)-off)
					b.captured(d, uint16(i), b.buf[off:off+l])
					off += l
				}
			}
			d.stats.Sent.Add(uint64(b.n))
			b.reset()
			return
		case unix.EINVAL, unix.EIO, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
			d.noGSO.Store(true) // the kernel cannot: one by one from now on
		default:
			d.stats.SendFail.Add(uint64(b.n))
			b.reset()
			return
		}
	}
	// One by one: each datagram's identification is 0.
	for i, off := 0, 0; i < b.n; i++ {
		l := min(b.seg, len(b.buf)-off)
		pkt := b.buf[off : off+l]
		if i > 0 && d.addr.Is4() && b.to.Is4() {
			ib.PutICRC(pkt[l-ib.ICRCLen:], b.icrc(d, b.to, pkt[:l-ib.ICRCLen], 0))
		}
		off += l
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
	if captureFn.Load() != nil {
		b.captured(d, 0, pkt)
	}
	if err := d.write(b, pkt); err != nil {
		d.stats.SendFail.Add(1)
	} else {
		d.stats.Sent.Add(1)
	}
}

func (b *batch) reset() {
	b.buf, b.n, b.seg, b.closed = b.buf[:0], 0, 0, false
}
