package wire

import (
	"encoding/binary"
	"strconv"
)

// RFC 7306 message bodies: Immediate Data, Atomic Request, Atomic Response.
// What was verified, and from where, is in the package doc. siw implements
// none of them; send them only to a peer known to accept them.

// RFC 7306 body sizes (after the 20-byte untagged FPDU header).
const (
	ImmediateBodyLen      = 8
	AtomicRequestBodyLen  = 52
	AtomicResponseBodyLen = 12
)

// Immediate is a view of an Immediate Data body: 8 bytes of data, delivered
// to the receiver's completion instead of to memory.
//
// Verbs immediate data is 32 bits; Chelsio's cxgb4 (the one RNIC driver in
// Linux that receives RFC 7306 immediate data) keeps it in the first four
// bytes. Imm32 and Imm32Value follow that convention.
type Immediate []byte

// Value returns the 64-bit immediate data (big-endian), or 0 if the view is
// short.
func (m Immediate) Value() uint64 {
	if len(m) < ImmediateBodyLen {
		return 0
	}
	return binary.BigEndian.Uint64(m)
}

// Imm32 returns the first four bytes as a 32-bit verbs immediate value.
func (m Immediate) Imm32() uint32 { return uint32(m.Value() >> 32) }

// Imm32Value returns the 64-bit immediate data that carries the 32-bit
// verbs value imm in its first four bytes.
func Imm32Value(imm uint32) uint64 { return uint64(imm) << 32 }

// PutImmediate writes a complete 28-byte Immediate Data FPDU header to b:
// ULPDU_Length 26, untagged, L=1, opcode Immediate Data (with SE when se),
// QN 0 (the Send queue, sharing the Sends' MSN sequence), MO 0, then value.
// It panics if b is shorter than ImmediateLen.
func PutImmediate(b []byte, se bool, msn uint32, value uint64) {
	_ = b[ImmediateLen-1]
	op := OpImmediate
	if se {
		op = OpImmediateSE
	}
	PutUntagged(b, op, true, 0, QNSend, msn, 0, ImmediateULPDULen)
	binary.BigEndian.PutUint64(b[UntaggedHeaderLen:], value)
}

// AtomicOp is the RFC 7306 atomic operation code (the low four bits of the
// Atomic Request's first word).
type AtomicOp uint8

// Atomic operation codes.
const (
	AtomicFetchAdd    AtomicOp = 0
	AtomicSwap        AtomicOp = 1
	AtomicCompareSwap AtomicOp = 2
	// AtomicWriteGoverbs and FlushGoverbs are goverbs' own uses of codes RFC
	// 7306 leaves reserved, sent only between goverbs peers that negotiated
	// the extensions. ATOMIC_WRITE carries the 8 bytes to store in Add or
	// Swap Data (the bytes in memory order, read as a big-endian number);
	// FLUSH carries the length in Add or Swap Data and the verbs flush type
	// in Compare Data. Both are answered by an Atomic Response (value 0)
	// once done at the target.
	AtomicWriteGoverbs AtomicOp = 0xE
	FlushGoverbs       AtomicOp = 0xF
)

// String names the atomic operation.
func (o AtomicOp) String() string {
	switch o {
	case AtomicFetchAdd:
		return "FetchAdd"
	case AtomicSwap:
		return "Swap"
	case AtomicCompareSwap:
		return "CompareSwap"
	case AtomicWriteGoverbs:
		return "AtomicWrite(goverbs)"
	case FlushGoverbs:
		return "Flush(goverbs)"
	}
	return "AtomicOp(" + strconv.Itoa(int(o)) + ")"
}

// AtomicRequest is a view of an Atomic Request body (52 bytes):
//
//	reserved (28 bits) | atomic opcode (4 bits) | Request Identifier (4) |
//	Remote STag (4) | Remote TO (8) | Add or Swap Data (8) |
//	Add or Swap Mask (8) | Compare Data (8) | Compare Mask (8)
//
// The accessors read zero from a slice too short to hold the field.
type AtomicRequest []byte

func u32At(b []byte, off int) uint32 {
	if len(b) < off+4 {
		return 0
	}
	return binary.BigEndian.Uint32(b[off:])
}

func u64At(b []byte, off int) uint64 {
	if len(b) < off+8 {
		return 0
	}
	return binary.BigEndian.Uint64(b[off:])
}

// Op returns the atomic operation code.
func (r AtomicRequest) Op() AtomicOp { return AtomicOp(u32At(r, 0) & 0xF) }

// Reserved returns the 28 reserved bits of the first word (sent as 0).
func (r AtomicRequest) Reserved() uint32 { return u32At(r, 0) >> 4 }

// ReqID returns the Request Identifier, echoed in the Atomic Response.
func (r AtomicRequest) ReqID() uint32 { return u32At(r, 4) }

// STag returns the remote (target) STag.
func (r AtomicRequest) STag() uint32 { return u32At(r, 8) }

// TO returns the remote tagged offset of the 8-byte target.
func (r AtomicRequest) TO() uint64 { return u64At(r, 12) }

// AddSwap returns the Add or Swap Data.
func (r AtomicRequest) AddSwap() uint64 { return u64At(r, 20) }

// AddSwapMask returns the Add or Swap Mask.
func (r AtomicRequest) AddSwapMask() uint64 { return u64At(r, 28) }

// Compare returns the Compare Data.
func (r AtomicRequest) Compare() uint64 { return u64At(r, 36) }

// CompareMask returns the Compare Mask.
func (r AtomicRequest) CompareMask() uint64 { return u64At(r, 44) }

// Fields decodes the body.
func (r AtomicRequest) Fields() AtomicRequestFields {
	return AtomicRequestFields{
		Op: r.Op(), ReqID: r.ReqID(), STag: r.STag(), TO: r.TO(),
		AddSwap: r.AddSwap(), AddSwapMask: r.AddSwapMask(),
		Compare: r.Compare(), CompareMask: r.CompareMask(),
	}
}

// AtomicRequestFields are the fields of an Atomic Request body.
type AtomicRequestFields struct {
	Op          AtomicOp
	ReqID       uint32
	STag        uint32
	TO          uint64
	AddSwap     uint64
	AddSwapMask uint64
	Compare     uint64
	CompareMask uint64
}

// Encode writes the 52-byte body to b (reserved bits 0); it panics if b is
// shorter.
func (f *AtomicRequestFields) Encode(b []byte) {
	_ = b[AtomicRequestBodyLen-1]
	binary.BigEndian.PutUint32(b[0:4], uint32(f.Op&0xF))
	binary.BigEndian.PutUint32(b[4:8], f.ReqID)
	binary.BigEndian.PutUint32(b[8:12], f.STag)
	binary.BigEndian.PutUint64(b[12:20], f.TO)
	binary.BigEndian.PutUint64(b[20:28], f.AddSwap)
	binary.BigEndian.PutUint64(b[28:36], f.AddSwapMask)
	binary.BigEndian.PutUint64(b[36:44], f.Compare)
	binary.BigEndian.PutUint64(b[44:52], f.CompareMask)
}

// PutAtomicRequest writes a complete 72-byte Atomic Request FPDU header to
// b: ULPDU_Length 70, untagged, L=1, QN 1 (shared with Read Requests and
// counted against ORD/IRD), the given MSN, MO 0, then the body. It panics if
// b is shorter than AtomicRequestLen.
func PutAtomicRequest(b []byte, msn uint32, f *AtomicRequestFields) {
	_ = b[AtomicRequestLen-1]
	PutUntagged(b, OpAtomicRequest, true, 0, QNReadRequest, msn, 0, AtomicRequestULPDULen)
	f.Encode(b[UntaggedHeaderLen:])
}

// AtomicResponse is a view of an Atomic Response body (12 bytes):
//
//	Original Request Identifier (4) | Original Remote Data Value (8)
type AtomicResponse []byte

// ReqID returns the Request Identifier of the Atomic Request answered.
func (r AtomicResponse) ReqID() uint32 { return u32At(r, 0) }

// Orig returns the value the target held before the operation.
func (r AtomicResponse) Orig() uint64 { return u64At(r, 4) }

// Fields decodes the body.
func (r AtomicResponse) Fields() AtomicResponseFields {
	return AtomicResponseFields{ReqID: r.ReqID(), Orig: r.Orig()}
}

// AtomicResponseFields are the fields of an Atomic Response body.
type AtomicResponseFields struct {
	ReqID uint32
	Orig  uint64
}

// Encode writes the 12-byte body to b; it panics if b is shorter.
func (f *AtomicResponseFields) Encode(b []byte) {
	_ = b[AtomicResponseBodyLen-1]
	binary.BigEndian.PutUint32(b[0:4], f.ReqID)
	binary.BigEndian.PutUint64(b[4:12], f.Orig)
}

// PutAtomicResponse writes a complete 32-byte Atomic Response FPDU header to
// b: ULPDU_Length 30, untagged, L=1, QN 3, the given MSN (of the responder's
// QN 3 sequence), MO 0, then the body. It panics if b is shorter than
// AtomicResponseLen.
func PutAtomicResponse(b []byte, msn uint32, f *AtomicResponseFields) {
	_ = b[AtomicResponseLen-1]
	PutUntagged(b, OpAtomicResponse, true, 0, QNAtomicResponse, msn, 0, AtomicResponseULPDULen)
	f.Encode(b[UntaggedHeaderLen:])
}
