package ib

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Opcode is a BTH opcode: a transport (RC, UC, UD) in the top three bits
// and an operation in the low five.
type Opcode uint8

// RC opcodes (IBA 9.2.1, Table 38), and the UD ones.
const (
	SendFirst         Opcode = 0x00
	SendMiddle        Opcode = 0x01
	SendLast          Opcode = 0x02
	SendLastImm       Opcode = 0x03
	SendOnly          Opcode = 0x04
	SendOnlyImm       Opcode = 0x05
	WriteFirst        Opcode = 0x06
	WriteMiddle       Opcode = 0x07
	WriteLast         Opcode = 0x08
	WriteLastImm      Opcode = 0x09
	WriteOnly         Opcode = 0x0A
	WriteOnlyImm      Opcode = 0x0B
	ReadRequest       Opcode = 0x0C
	ReadResponseFirst Opcode = 0x0D
	ReadResponseMid   Opcode = 0x0E
	ReadResponseLast  Opcode = 0x0F
	ReadResponseOnly  Opcode = 0x10
	Acknowledge       Opcode = 0x11
	AtomicAcknowledge Opcode = 0x12
	CompareSwap       Opcode = 0x13
	FetchAdd          Opcode = 0x14
	SendLastInv       Opcode = 0x16
	SendOnlyInv       Opcode = 0x17
	Flush             Opcode = 0x1C // IBTA 1.5 (rxe since Linux 6.2)
	AtomicWrite       Opcode = 0x1D // IBTA 1.5 (rxe since Linux 6.2)

	UDSendOnly    Opcode = 0x64
	UDSendOnlyImm Opcode = 0x65
)

// Header and field sizes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	ImmLen          = 4
	IETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	DETHLen         = 8
	FETHLen         = 4
	ICRCLen         = 4
	// UDPPort is RoCEv2's destination port.
	UDPPort = 4791
	// DefaultPKey is the default partition's full-member key.
	DefaultPKey = 0xFFFF
)

// What an opcode's packets carry (OpInfo.Mask).
const (
	HasRETH = 1 << iota
	HasAETH
	HasImm
	HasIETH
	HasAtomicETH
	HasAtomicAck
	HasDETH
	HasFETH
	HasPayload // data follows the headers
	IsFirst    // the first packet of a message (or only)
	IsLast     // the last packet of a message (or only)
	IsRequest  // sent by a requester (else a response: ACK, read response, atomic ACK)
	IsSend
	IsWrite
	IsRead
	IsAtomic
	IsUD
)

// OpInfo describes an opcode.
type OpInfo struct {
	Name string
	Mask uint32
	// HdrLen is the length of BTH and every extension header.
	HdrLen int
}

var opInfo [256]OpInfo

func def(op Opcode, name string, mask uint32) {
	n := BTHLen
	for _, h := range []struct {
		bit uint32
		n   int
	}{{HasRETH, RETHLen}, {HasAETH, AETHLen}, {HasImm, ImmLen}, {HasIETH, IETHLen}, {HasAtomicETH, AtomicETHLen},
		{HasAtomicAck, AtomicAckETHLen}, {HasDETH, DETHLen}, {HasFETH, FETHLen}} {
		if mask&h.bit != 0 {
			n += h.n
		}
	}
	opInfo[op] = OpInfo{Name: name, Mask: mask, HdrLen: n}
}

func init() {
	const (
		req   = IsRequest
		first = IsFirst
		last  = IsLast
		only  = IsFirst | IsLast
		pay   = HasPayload
	)
	def(SendFirst, "SEND_FIRST", req|IsSend|first|pay)
	def(SendMiddle, "SEND_MIDDLE", req|IsSend|pay)
	def(SendLast, "SEND_LAST", req|IsSend|last|pay)
	def(SendLastImm, "SEND_LAST_WITH_IMMEDIATE", req|IsSend|last|pay|HasImm)
	def(SendOnly, "SEND_ONLY", req|IsSend|only|pay)
	def(SendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", req|IsSend|only|pay|HasImm)
	def(WriteFirst, "RDMA_WRITE_FIRST", req|IsWrite|first|pay|HasRETH)
	def(WriteMiddle, "RDMA_WRITE_MIDDLE", req|IsWrite|pay)
	def(WriteLast, "RDMA_WRITE_LAST", req|IsWrite|last|pay)
	def(WriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", req|IsWrite|last|pay|HasImm)
	def(WriteOnly, "RDMA_WRITE_ONLY", req|IsWrite|only|pay|HasRETH)
	def(WriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", req|IsWrite|only|pay|HasRETH|HasImm)
	def(ReadRequest, "RDMA_READ_REQUEST", req|IsRead|only|HasRETH)
	def(ReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", IsRead|first|pay|HasAETH)
	def(ReadResponseMid, "RDMA_READ_RESPONSE_MIDDLE", IsRead|pay)
	def(ReadResponseLast, "RDMA_READ_RESPONSE_LAST", IsRead|last|pay|HasAETH)
	def(ReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", IsRead|only|pay|HasAETH)
	def(Acknowledge, "ACKNOWLEDGE", only|HasAETH)
	def(AtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", only|HasAETH|HasAtomicAck|IsAtomic)
	def(CompareSwap, "COMPARE_SWAP", req|IsAtomic|only|HasAtomicETH)
	def(FetchAdd, "FETCH_ADD", req|IsAtomic|only|HasAtomicETH)
	def(SendLastInv, "SEND_LAST_WITH_INVALIDATE", req|IsSend|last|pay|HasIETH)
	def(SendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", req|IsSend|only|pay|HasIETH)
	def(Flush, "FLUSH", req|only|HasFETH|HasRETH)
	def(AtomicWrite, "ATOMIC_WRITE", req|IsAtomic|only|pay|HasRETH)
	def(UDSendOnly, "UD_SEND_ONLY", req|IsSend|IsUD|only|pay|HasDETH)
	def(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", req|IsSend|IsUD|only|pay|HasDETH|HasImm)
}

// Info returns what op is; the zero OpInfo (empty Name) for an opcode this
// package does not know.
func (op Opcode) Info() OpInfo { return opInfo[op] }

// String names the opcode.
func (op Opcode) String() string {
	if n := opInfo[op].Name; n != "" {
		return n
	}
	return fmt.Sprintf("opcode(%#02x)", uint8(op))
}

// BTH is a view of a base transport header.
type BTH []byte

// Opcode returns the opcode.
func (h BTH) Opcode() Opcode { return Opcode(h[0]) }

// SE reports the solicited-event bit.
func (h BTH) SE() bool { return h[1]&0x80 != 0 }

// MigReq reports the migration-request bit.
func (h BTH) MigReq() bool { return h[1]&0x40 != 0 }

// PadCnt returns the number of pad bytes after the payload.
func (h BTH) PadCnt() int { return int(h[1]>>4) & 3 }

// TVer returns the transport header version (0).
func (h BTH) TVer() uint8 { return h[1] & 0x0F }

// PKey returns the partition key.
func (h BTH) PKey() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// DestQP returns the destination QP number.
func (h BTH) DestQP() uint32 { return binary.BigEndian.Uint32(h[4:]) & 0xFFFFFF }

// AckReq reports the acknowledge-request bit.
func (h BTH) AckReq() bool { return h[8]&0x80 != 0 }

// PSN returns the packet sequence number.
func (h BTH) PSN() uint32 { return binary.BigEndian.Uint32(h[8:]) & 0xFFFFFF }

// PutBTH writes a BTH into b (at least BTHLen bytes).
func PutBTH(b []byte, op Opcode, se bool, pad int, pkey uint16, destQP uint32, ackReq bool, psn uint32) {
	_ = b[11]
	b[0] = byte(op)
	f := byte(pad&3) << 4
	if se {
		f |= 0x80
	}
	b[1] = f
	binary.BigEndian.PutUint16(b[2:], pkey)
	binary.BigEndian.PutUint32(b[4:], destQP&0xFFFFFF)
	binary.BigEndian.PutUint32(b[8:], psn&0xFFFFFF)
	if ackReq {
		b[8] |= 0x80
	}
}

// PSN arithmetic: 24-bit sequence numbers compared modulo 2^24 (IBA 9.7.1).
const psnMask = 0xFFFFFF

// PSNAdd returns psn + n modulo 2^24.
func PSNAdd(psn uint32, n int) uint32 { return uint32(int64(psn)+int64(n)) & psnMask }

// PSNDiff returns a - b as a signed distance in the 24-bit sequence space
// (-2^23 .. 2^23-1): positive when a is after b.
func PSNDiff(a, b uint32) int32 {
	return int32((a-b)&psnMask<<8) >> 8
}

// AETH syndromes (IBA 9.7.5.2.2, Table 42).
const (
	SyndromeACK   = 0x00 // | credit count (0x1F: no credit limit)
	SyndromeRNR   = 0x20 // | RNR timer code
	SyndromeNAK   = 0x60 // | NAK code
	NAKPSNSeq     = 0    // PSN sequence error
	NAKInvalidReq = 1    // invalid request
	NAKRemAccess  = 2    // remote access error
	NAKRemOp      = 3    // remote operational error
	NAKInvalidRD  = 4    // invalid RD request
	CreditsNone   = 0x1F // ACK: no credit limit
)

// Errors of Parse.
var (
	ErrShort   = errors.New("packet shorter than its headers")
	ErrOpcode  = errors.New("unknown opcode")
	ErrVersion = errors.New("transport header version is not 0")
	ErrPad     = errors.New("pad count beyond the payload")
)

// Packet is a parsed packet: its headers' fields and its payload, which
// refers to the parsed slice.
type Packet struct {
	BTH     BTH
	Op      Opcode
	Mask    uint32
	PSN     uint32
	DestQP  uint32
	SE      bool
	AckReq  bool
	PKey    uint16
	Payload []byte // without pad and ICRC

	// RETH
	VA     uint64
	RKey   uint32
	DMALen uint32
	// AETH
	Syndrome uint8
	MSN      uint32
	// ImmDt, IETH (the rkey to invalidate)
	Imm uint32
	// AtomicETH: VA, RKey, and these
	SwapAdd, Compare uint64
	// AtomicAckETH
	Orig uint64
	// DETH
	QKey  uint32
	SrcQP uint32
	// FETH
	FETH uint32
}

// Parse parses b, a RoCEv2 UDP payload without its 4-byte ICRC (the
// caller checks and strips it), into p. Every length is checked; an
// opcode this package does not know is ErrOpcode.
func Parse(b []byte, p *Packet) error {
	if len(b) < BTHLen {
		return ErrShort
	}
	h := BTH(b[:BTHLen])
	op := h.Opcode()
	info := op.Info()
	if info.Name == "" {
		return ErrOpcode
	}
	if h.TVer() != 0 {
		return ErrVersion
	}
	if len(b) < info.HdrLen {
		return ErrShort
	}
	*p = Packet{BTH: h, Op: op, Mask: info.Mask, PSN: h.PSN(), DestQP: h.DestQP(), SE: h.SE(), AckReq: h.AckReq(), PKey: h.PKey()}
	o := BTHLen
	m := info.Mask
	if m&HasDETH != 0 { // DETH comes first on UD
		p.QKey = binary.BigEndian.Uint32(b[o:])
		p.SrcQP = binary.BigEndian.Uint32(b[o+4:]) & 0xFFFFFF
		o += DETHLen
	}
	if m&HasFETH != 0 {
		p.FETH = binary.BigEndian.Uint32(b[o:])
		o += FETHLen
	}
	if m&HasRETH != 0 {
		p.VA = binary.BigEndian.Uint64(b[o:])
		p.RKey = binary.BigEndian.Uint32(b[o+8:])
		p.DMALen = binary.BigEndian.Uint32(b[o+12:])
		o += RETHLen
	}
	if m&HasAtomicETH != 0 {
		p.VA = binary.BigEndian.Uint64(b[o:])
		p.RKey = binary.BigEndian.Uint32(b[o+8:])
		p.SwapAdd = binary.BigEndian.Uint64(b[o+12:])
		p.Compare = binary.BigEndian.Uint64(b[o+20:])
		o += AtomicETHLen
	}
	if m&HasAETH != 0 {
		a := binary.BigEndian.Uint32(b[o:])
		p.Syndrome, p.MSN = uint8(a>>24), a&0xFFFFFF
		o += AETHLen
	}
	if m&HasAtomicAck != 0 {
		p.Orig = binary.BigEndian.Uint64(b[o:])
		o += AtomicAckETHLen
	}
	if m&HasImm != 0 {
		p.Imm = binary.BigEndian.Uint32(b[o:])
		o += ImmLen
	}
	if m&HasIETH != 0 {
		p.Imm = binary.BigEndian.Uint32(b[o:])
		o += IETHLen
	}
	rest := b[o:]
	pad := h.PadCnt()
	if pad > len(rest) {
		return ErrPad
	}
	p.Payload = rest[: len(rest)-pad : len(rest)-pad]
	if m&HasPayload == 0 && len(p.Payload) != 0 {
		return ErrShort // a header-only packet with data after its headers
	}
	return nil
}

// Builder writes a packet's headers in order into a buffer; the payload
// and pad follow them. Its methods append to H.
type Builder struct{ H []byte }

// BTH starts a packet.
func (b *Builder) BTH(op Opcode, se bool, pad int, pkey uint16, destQP uint32, ackReq bool, psn uint32) {
	n := len(b.H)
	b.H = append(b.H, make([]byte, BTHLen)...)
	PutBTH(b.H[n:], op, se, pad, pkey, destQP, ackReq, psn)
}

func (b *Builder) grow(n int) []byte {
	l := len(b.H)
	b.H = append(b.H, make([]byte, n)...) // no allocation within H's capacity
	return b.H[l:]
}

// RETH appends a RETH.
func (b *Builder) RETH(va uint64, rkey, length uint32) {
	s := b.grow(RETHLen)
	binary.BigEndian.PutUint64(s, va)
	binary.BigEndian.PutUint32(s[8:], rkey)
	binary.BigEndian.PutUint32(s[12:], length)
}

// AETH appends an AETH.
func (b *Builder) AETH(syndrome uint8, msn uint32) {
	binary.BigEndian.PutUint32(b.grow(AETHLen), uint32(syndrome)<<24|msn&0xFFFFFF)
}

// Imm appends an ImmDt or an IETH (a 32-bit word).
func (b *Builder) Imm(v uint32) { binary.BigEndian.PutUint32(b.grow(ImmLen), v) }

// AtomicETH appends an AtomicETH.
func (b *Builder) AtomicETH(va uint64, rkey uint32, swapAdd, compare uint64) {
	s := b.grow(AtomicETHLen)
	binary.BigEndian.PutUint64(s, va)
	binary.BigEndian.PutUint32(s[8:], rkey)
	binary.BigEndian.PutUint64(s[12:], swapAdd)
	binary.BigEndian.PutUint64(s[20:], compare)
}

// AtomicAck appends an AtomicAckETH.
func (b *Builder) AtomicAck(orig uint64) { binary.BigEndian.PutUint64(b.grow(AtomicAckETHLen), orig) }

// DETH appends a DETH.
func (b *Builder) DETH(qkey, srcQP uint32) {
	s := b.grow(DETHLen)
	binary.BigEndian.PutUint32(s, qkey)
	binary.BigEndian.PutUint32(s[4:], srcQP&0xFFFFFF)
}

// FETH appends a FETH.
func (b *Builder) FETH(v uint32) { binary.BigEndian.PutUint32(b.grow(FETHLen), v) }

// Pad returns the pad count for a payload of n bytes.
func Pad(n int) int { return -n & 3 }

// SendOpcode is the opcode of a SEND's packet: first and last say where it
// stands in its message, imm and inv ask for the variant that carries
// immediate data or an rkey to invalidate (on the last or only packet).
func SendOpcode(first, last, imm, inv bool) Opcode {
	switch {
	case first && last && imm:
		return SendOnlyImm
	case first && last && inv:
		return SendOnlyInv
	case first && last:
		return SendOnly
	case first:
		return SendFirst
	case last && imm:
		return SendLastImm
	case last && inv:
		return SendLastInv
	case last:
		return SendLast
	}
	return SendMiddle
}

// WriteOpcode is the opcode of an RDMA WRITE's packet (imm: with immediate
// data, on the last or only packet).
func WriteOpcode(first, last, imm bool) Opcode {
	switch {
	case first && last && imm:
		return WriteOnlyImm
	case first && last:
		return WriteOnly
	case first:
		return WriteFirst
	case last && imm:
		return WriteLastImm
	case last:
		return WriteLast
	}
	return WriteMiddle
}

// ReadResponseOpcode is the opcode of response i of the n a READ takes.
func ReadResponseOpcode(i, n int) Opcode {
	switch {
	case n == 1:
		return ReadResponseOnly
	case i == 0:
		return ReadResponseFirst
	case i == n-1:
		return ReadResponseLast
	}
	return ReadResponseMid
}
