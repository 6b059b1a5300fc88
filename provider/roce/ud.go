package roce

import (
	"encoding/binary"
	"net/netip"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// GRHLen is the size of the Global Routing Header at the start of every UD
// receive buffer.
const GRHLen = 40

// sendUD sends a datagram: one packet, complete when it is handed to the
// socket.
func (q *qp) sendUD(w *engine.WQE) engine.Result {
	wr := &w.WR
	if int(w.Len) > q.d.mtu.Bytes() {
		return engine.Fail(verbs.WCLocLenErr) // a datagram is one packet
	}
	ah := wr.AH.Attr()
	dst := netip.AddrFrom16(ah.GRH.DGID).Unmap()
	if !ah.IsGlobal || !dst.IsValid() {
		return engine.ResultOK // no address: the datagram is lost, as on a fabric
	}
	qkey := wr.RemoteQKey
	if qkey&0x8000_0000 != 0 { // a controlled Q_Key: the QP's own
		qkey = q.resp.QKey()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	segs, st := q.req.Payload(w, q.s.segs[:0])
	q.s.segs = segs
	if st != verbs.WCSuccess {
		return engine.Fail(st)
	}
	op := ib.UDSendOnly
	if wr.Opcode == verbs.WRSendWithImm {
		op = ib.UDSendOnlyImm
	}
	n := int(w.Len)
	var b ib.Builder
	b.H = q.s.bat.tail()
	b.BTH(op, wr.Flags&verbs.SendSolicited != 0, ib.Pad(n), ib.DefaultPKey, wr.RemoteQPN, false, q.s.npsn)
	q.s.npsn = ib.PSNAdd(q.s.npsn, 1)
	b.DETH(qkey, q.num)
	if op == ib.UDSendOnlyImm {
		b.Imm(wr.ImmData)
	}
	// The kernel copies the payload as the batch is flushed, before Send returns.
	q.s.bat.addRef(q.d, dst, len(b.H), segs, 0, n)
	q.s.bat.flush(q.d) // a post is one datagram (a list of them could share a batch)
	return engine.ResultOK
}

// receiveUD places a datagram, its GRH first (the device holds its receive
// lock). UD has no acknowledgements: a datagram that cannot be placed (a
// wrong Q_Key, no receive posted) is dropped, as on a fabric.
func (q *qp) receiveUD(p *ib.Packet, from netip.AddrPort, ho *engine.Handoff) {
	if p.Mask&ib.IsUD == 0 || !q.resp.CanReceive() || p.QKey != q.resp.QKey() {
		q.d.stats.NoQP.Add(1)
		return
	}
	rc, ok := q.resp.TakeRecv()
	if !ok {
		return
	}
	n := len(p.Payload)
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: p.SrcQP, ByteLen: uint32(GRHLen + n), Flags: verbs.WCFlagGRH}
	if p.Mask&ib.HasImm != 0 {
		wc.Flags |= verbs.WCFlagWithImm
		wc.ImmData = p.Imm
	}
	segs, st := q.resp.RecvSegments(rc, q.r.recv.segs[:0])
	q.r.recv.segs = segs
	switch {
	case st != verbs.WCSuccess:
		wc.Status = st
	case engine.TotalLen(segs) < GRHLen+n:
		wc.Status = verbs.WCLocLenErr
	default:
		var grh [GRHLen]byte
		putGRH(&grh, from.Addr(), q.d.addr, packetHdrs(p)+n+p.BTH.PadCnt())
		engine.CopyInto(segs, 0, grh[:])
		engine.CopyInto(segs, GRHLen, p.Payload)
	}
	q.resp.CompleteRecv(rc, &wc, p.SE)
}

// packetHdrs is the length of the transport headers and ICRC of a UD packet.
func packetHdrs(p *ib.Packet) int { return p.Op.Info().HdrLen + ib.ICRCLen }

// putGRH writes the GRH of a received RoCEv2 datagram as rxe does: for
// IPv4, the IPv4 header (reconstructed: a UDP socket shows its addresses
// and length, not its TOS, TTL or identification) in the last 20 bytes;
// for IPv6, the IPv6 header. n is the UDP payload's length.
func putGRH(h *[GRHLen]byte, src, dst netip.Addr, n int) {
	if src.Is4() {
		ip := h[20:]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+n))
		ip[6] = 0x40 // DF
		ip[8] = 64
		ip[9] = 17
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		return
	}
	binary.BigEndian.PutUint32(h[0:], 6<<28)
	binary.BigEndian.PutUint16(h[4:], uint16(8+n))
	h[6] = 17
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
}
