// Package capture records goverbs' RDMA traffic to a pcapng file that
// Wireshark and tshark open and decode, for every provider:
//
//   - roce: the datagrams as they are on the wire, sent and received
//     (InfiniBand dissector, RoCEv2 on UDP port 4791);
//   - iwarp: each connection's TCP stream as it is on the wire, MPA
//     Request and Reply, then FPDUs with their CRC (Wireshark's MPA,
//     DDP and RDMAP dissectors), one TCP segment per frame, with a
//     synthesized TCP handshake where the recording first sees a
//     connection and a FIN where a goverbs end closes it. What a goverbs
//     end writes is recorded as it writes it, what it reads once an FPDU
//     has been read whole and passed its checks (an FPDU refused with a
//     Terminate is not in the file, the Terminate is). A connection
//     already running when the recording starts begins mid-stream, which
//     Wireshark's MPA dissector cannot decode.
//   - loop and shm: RoCEv2 packets synthesized from the operations
//     the engine carries out, as a RoCE wire would have carried them:
//     SEND/WRITE first/middle/last/only (with immediate data and
//     invalidate), READ requests and responses, atomics and their
//     acknowledgements, FLUSH and ATOMIC WRITE, ACKs and NAKs for the
//     errors a responder reports, UD SENDs with their DETH. PSNs count per
//     QP; a QP's addresses are its GID's (IPv4-mapped GIDs as they are,
//     others as 10.x.y.z from the GID's last three bytes, 10.255.255.254
//     when the QP has no address vector); the payload is the real data.
//
// A recording is turned on for the process by Start, or by the
// environment variable GOVERBS_CAPTURE=FILE in a program that links this
// package, or by goverbs' --capture FILE; it can be limited to devices and
// QPs. With none on, the cost is an atomic load per request.
package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/hook"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// Options limit a recording.
type Options struct {
	Devices []string // only these devices (none: every device)
	QPs     []uint32 // only these QP numbers (none: every QP); RoCE datagrams by destination QP
}

// Recorder is an active recording.
type Recorder struct {
	opts    Options
	mu      sync.Mutex
	p       *pcapWriter
	f       *os.File // when Start opened it
	psn     map[qpKey]uint32
	streams map[streamKey]*tcpStream // iWARP connections
	closed  []streamKey              // streams a goverbs end closed, oldest first
	each    bool                     // flush after every packet (a recording nobody stops)
	packets atomic.Uint64
	stopped bool
}

type qpKey struct {
	dev string
	qpn uint32
}

var active atomic.Pointer[Recorder]

// ErrActive is returned by Start while another recording runs.
var ErrActive = errors.New("capture: a recording is already running")

// Start records the process's traffic to the pcapng file path (created or
// truncated) until Stop.
func Start(path string, o Options) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	r := &Recorder{opts: o, p: newPcapWriter(f), f: f, psn: map[qpKey]uint32{}, streams: map[streamKey]*tcpStream{}}
	if !active.CompareAndSwap(nil, r) {
		f.Close()
		os.Remove(path)
		return nil, ErrActive
	}
	engine.SetCaptureHook(r.op)
	hook.RoCECapture.Set(r.datagram, false)
	hook.IWARPCapture.Set(r.stream, false)
	return r, nil
}

// Packets returns how many packets the recording holds so far.
func (r *Recorder) Packets() uint64 { return r.packets.Load() }

// Stop ends the recording and closes its file.
func (r *Recorder) Stop() error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	r.mu.Unlock()
	engine.SetCaptureHook(nil)
	hook.RoCECapture.Set(nil, true)
	hook.IWARPCapture.Set(nil, true)
	active.CompareAndSwap(r, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.p.flush()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (r *Recorder) wants(dev string, qpn uint32) bool {
	return (len(r.opts.Devices) == 0 || slices.Contains(r.opts.Devices, dev)) &&
		(len(r.opts.QPs) == 0 || slices.Contains(r.opts.QPs, qpn))
}

// datagram records a RoCE device's real datagram.
func (r *Recorder) datagram(dev string, src, dst netip.AddrPort, id uint16, pkt []byte) {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return // the file's link type carries IPv4
	}
	qpn := uint32(0)
	if len(pkt) >= ib.BTHLen {
		qpn = binary.BigEndian.Uint32(pkt[8:]) & 0xFFFFFF
	}
	if !r.wants(dev, qpn) {
		return
	}
	r.mu.Lock()
	if !r.stopped {
		r.p.udp(time.Now(), src, dst, id, pkt)
		r.packets.Add(1)
		if r.each {
			r.p.flush()
		}
	}
	r.mu.Unlock()
}

// addrOf is the IPv4 address that stands for a GID in the file.
func addrOf(g verbs.GID) netip.Addr {
	a := netip.AddrFrom16(g)
	switch {
	case a.Is4In6():
		return a.Unmap()
	case g == verbs.GID{}:
		return netip.AddrFrom4([4]byte{10, 255, 255, 254})
	}
	return netip.AddrFrom4([4]byte{10, g[13], g[14], g[15]})
}

func sport(qpn uint32) uint16 { return 0xC000 | uint16(qpn&0x3FFF) }

const mtu = 4096

// op synthesizes the packets of an engine operation.
func (r *Recorder) op(o *engine.CaptureOp) {
	if !r.wants(o.Device, o.QPNum) {
		return
	}
	local := netip.AddrPortFrom(addrOf(o.Local), sport(o.QPNum))
	remote := netip.AddrPortFrom(addrOf(o.Remote), ib.UDPPort)
	if local.Addr() == remote.Addr() {
		// Two QPs of one device: tell the ends apart by the last byte.
		a := remote.Addr().As4()
		a[3] ^= 0x80
		remote = netip.AddrPortFrom(netip.AddrFrom4(a), ib.UDPPort)
	}
	if o.DestQPN < 2 {
		// A QP a connection manager connected has no destination QP
		// number in its attributes (iWARP has none at all): one stands
		// in, other than QP0 and QP1, which carry management datagrams.
		o.DestQPN = o.QPNum ^ 0x800000
	}
	data := flatten(o.Data)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	key := qpKey{o.Device, o.QPNum}
	psn := r.psn[key]
	wr := o.WR
	now := time.Now()
	emit := func(src, dst netip.AddrPort, b *ib.Builder) {
		r.p.udp(now, src, dst, 0, icrc(src, dst, b.H))
		r.packets.Add(1)
	}
	back := netip.AddrPortFrom(remote.Addr(), sport(o.DestQPN))
	to := netip.AddrPortFrom(local.Addr(), ib.UDPPort)
	if r.each {
		defer r.p.flush()
	}
	if o.Done {
		r.response(o, wr, data, psn, back, to, emit)
		return
	}
	var b ib.Builder
	n := int(o.Len)
	pkts := max(1, (n+mtu-1)/mtu)
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		for i := range pkts {
			b.H = b.H[:0]
			chunk := data[min(i*mtu, len(data)):min((i+1)*mtu, len(data))]
			op := msgOpcode(wr.Opcode, i == 0, i == pkts-1)
			if o.UD {
				op = ud(wr.Opcode)
			}
			b.BTH(op, false, ib.Pad(len(chunk)), ib.DefaultPKey, o.DestQPN, i == pkts-1, ib.PSNAdd(psn, i))
			info := op.Info().Mask
			if info&ib.HasDETH != 0 {
				b.DETH(wr.RemoteQKey, o.QPNum)
			}
			if info&ib.HasRETH != 0 {
				b.RETH(wr.RemoteAddr, wr.RKey, o.Len)
			}
			if info&(ib.HasImm|ib.HasIETH) != 0 {
				if wr.Opcode == verbs.WRSendWithInv {
					b.Imm(wr.InvalidateRKey)
				} else {
					b.Imm(wr.ImmData)
				}
			}
			b.H = append(b.H, chunk...)
			b.H = append(b.H, make([]byte, ib.Pad(len(chunk)))...)
			emit(local, remote, &b)
		}
		r.psn[key] = ib.PSNAdd(psn, pkts)
		return
	case verbs.WRRDMARead:
		b.BTH(ib.ReadRequest, false, 0, ib.DefaultPKey, o.DestQPN, true, psn)
		b.RETH(wr.RemoteAddr, wr.RKey, o.Len)
	case verbs.WRAtomicCmpAndSwp:
		b.BTH(ib.CompareSwap, false, 0, ib.DefaultPKey, o.DestQPN, true, psn)
		b.AtomicETH(wr.RemoteAddr, wr.RKey, wr.Swap, wr.CompareAdd)
	case verbs.WRAtomicFetchAndAdd:
		b.BTH(ib.FetchAdd, false, 0, ib.DefaultPKey, o.DestQPN, true, psn)
		b.AtomicETH(wr.RemoteAddr, wr.RKey, wr.CompareAdd, 0)
	case verbs.WRFlush:
		b.BTH(ib.Flush, false, 0, ib.DefaultPKey, o.DestQPN, true, psn)
		b.FETH(uint32(wr.FlushType) & 0xF)
		b.RETH(wr.RemoteAddr, wr.RKey, wr.FlushLen)
	case verbs.WRAtomicWrite:
		b.BTH(ib.AtomicWrite, false, 0, ib.DefaultPKey, o.DestQPN, true, psn)
		b.RETH(wr.RemoteAddr, wr.RKey, 8)
		v := make([]byte, 8)
		copy(v, data)
		b.H = append(b.H, v...)
	default:
		return
	}
	emit(local, remote, &b)
	if wr.Opcode == verbs.WRRDMARead {
		pkts = max(1, (n+mtu-1)/mtu) // the responses take the PSNs
	} else {
		pkts = 1
	}
	r.psn[key] = ib.PSNAdd(psn, pkts)
}

// response synthesizes what the responder sent back for a finished
// request: READ responses, an atomic acknowledgement, an ACK or a NAK. Its
// PSNs end at the requester's next one.
func (r *Recorder) response(o *engine.CaptureOp, wr *verbs.SendWR, data []byte, next uint32, src, dst netip.AddrPort, emit func(src, dst netip.AddrPort, b *ib.Builder)) {
	if o.UD {
		return // nothing comes back
	}
	var b ib.Builder
	last := ib.PSNAdd(next, -1)
	switch o.Status {
	case verbs.WCSuccess:
	case verbs.WCRemAccessErr:
		b.BTH(ib.Acknowledge, false, 0, ib.DefaultPKey, o.QPNum, false, last)
		b.AETH(ib.SyndromeNAK|2, 0)
		emit(src, dst, &b)
		return
	case verbs.WCRemInvReqErr:
		b.BTH(ib.Acknowledge, false, 0, ib.DefaultPKey, o.QPNum, false, last)
		b.AETH(ib.SyndromeNAK|1, 0)
		emit(src, dst, &b)
		return
	case verbs.WCRemOpErr:
		b.BTH(ib.Acknowledge, false, 0, ib.DefaultPKey, o.QPNum, false, last)
		b.AETH(ib.SyndromeNAK|3, 0)
		emit(src, dst, &b)
		return
	default:
		return // nothing came back (RETRY_EXC_ERR), or it never left (flushed, local errors)
	}
	switch wr.Opcode {
	case verbs.WRRDMARead:
		pkts := max(1, (len(data)+mtu-1)/mtu)
		first := ib.PSNAdd(next, -pkts)
		for i := range pkts {
			b.H = b.H[:0]
			chunk := data[min(i*mtu, len(data)):min((i+1)*mtu, len(data))]
			op := ib.ReadResponseOpcode(i, pkts)
			b.BTH(op, false, ib.Pad(len(chunk)), ib.DefaultPKey, o.QPNum, false, ib.PSNAdd(first, i))
			if op.Info().Mask&ib.HasAETH != 0 {
				b.AETH(ib.SyndromeACK|0x1F, 0)
			}
			b.H = append(b.H, chunk...)
			b.H = append(b.H, make([]byte, ib.Pad(len(chunk)))...)
			emit(src, dst, &b)
		}
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		b.BTH(ib.AtomicAcknowledge, false, 0, ib.DefaultPKey, o.QPNum, false, last)
		b.AETH(ib.SyndromeACK|0x1F, 0)
		var orig uint64
		if len(data) >= 8 {
			orig = binary.LittleEndian.Uint64(data)
		}
		b.AtomicAck(orig)
		emit(src, dst, &b)
	default:
		b.BTH(ib.Acknowledge, false, 0, ib.DefaultPKey, o.QPNum, false, last)
		b.AETH(ib.SyndromeACK|0x1F, 0)
		emit(src, dst, &b)
	}
}

// msgOpcode is the opcode of a SEND's or an RDMA WRITE's packet.
func msgOpcode(op verbs.WROpcode, first, last bool) ib.Opcode {
	if op == verbs.WRRDMAWrite || op == verbs.WRRDMAWriteWithImm {
		return ib.WriteOpcode(first, last, op == verbs.WRRDMAWriteWithImm)
	}
	return ib.SendOpcode(first, last, op == verbs.WRSendWithImm, op == verbs.WRSendWithInv)
}

func ud(op verbs.WROpcode) ib.Opcode {
	if op == verbs.WRSendWithImm {
		return ib.UDSendOnlyImm
	}
	return ib.UDSendOnly
}

func flatten(segs [][]byte) []byte {
	if len(segs) == 1 {
		return slices.Clone(segs[0])
	}
	var out []byte
	for _, s := range segs {
		out = append(out, s...)
	}
	return out
}

// Env is the environment variable whose file a program that links this
// package records to from its start.
const Env = "GOVERBS_CAPTURE"

// FromEnv is the recording GOVERBS_CAPTURE started, or nil.
var FromEnv *Recorder

func init() {
	if path := os.Getenv(Env); path != "" {
		var err error
		if FromEnv, err = Start(path, Options{}); err != nil {
			fmt.Fprintf(os.Stderr, "goverbs: %s ignored: %v\n", Env, err)
			return
		}
		// Nothing stops it: every packet reaches the file at once.
		FromEnv.mu.Lock()
		FromEnv.each = true
		FromEnv.mu.Unlock()
	}
}
