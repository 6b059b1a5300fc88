package wire

import (
	"encoding/binary"
	"strconv"
)

// DDP (RFC 5041) segment headers as RDMAP (RFC 5040) uses them. Every
// header here is an FPDU header: it starts with the 2-byte MPA
// ULPDU_Length, then the two control bytes:
//
//	c0: T (0x80) | L (0x40) | reserved (0x3C) | DV (0x03, = 1)
//	c1: RV (0xC0, = 1) | reserved (0x30) | RDMAP opcode (0x0F)
//
// then STag (4) and TO (8) when tagged, or RsvdULP/Invalidate STag (4), QN
// (4), MSN (4) and MO (4) when untagged. Multi-byte fields are big-endian.

// Opcode is an RDMAP message opcode (c1 & 0x0F).
type Opcode uint8

// RDMAP opcodes: RFC 5040 (0..7) and RFC 7306 (8..11, see the package doc
// for how far those were verified).
const (
	OpWrite          Opcode = 0x0
	OpReadRequest    Opcode = 0x1
	OpReadResponse   Opcode = 0x2
	OpSend           Opcode = 0x3
	OpSendInv        Opcode = 0x4
	OpSendSE         Opcode = 0x5
	OpSendSEInv      Opcode = 0x6
	OpTerminate      Opcode = 0x7
	OpImmediate      Opcode = 0x8 // RFC 7306 Immediate Data
	OpImmediateSE    Opcode = 0x9 // RFC 7306 Immediate Data with Solicited Event
	OpAtomicRequest  Opcode = 0xA // RFC 7306
	OpAtomicResponse Opcode = 0xB // RFC 7306
)

var opNames = [...]string{
	"Write", "ReadRequest", "ReadResponse", "Send", "SendInv", "SendSE", "SendSEInv",
	"Terminate", "Immediate", "ImmediateSE", "AtomicRequest", "AtomicResponse",
}

// String names the opcode as RFC 5040 and RFC 7306 do.
func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// Known reports whether o is an RFC 5040 opcode, or with ext also an
// RFC 7306 one.
func (o Opcode) Known(ext bool) bool {
	return o <= OpTerminate || ext && o <= OpAtomicResponse
}

// Ext reports whether o is one of the RFC 7306 opcodes.
func (o Opcode) Ext() bool { return o >= OpImmediate && o <= OpAtomicResponse }

// Tagged reports whether messages with opcode o use the tagged buffer model
// (RDMA Write and Read Response).
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// Untagged queue numbers.
const (
	QNSend           = 0 // all Send variants; RFC 7306 Immediate Data (not verified, see package doc)
	QNReadRequest    = 1 // RDMA Read Request; RFC 7306 Atomic Request (per urdma, see package doc)
	QNTerminate      = 2
	QNAtomicResponse = 3 // RFC 7306 Atomic Response (per urdma, see package doc)
)

// QN returns the untagged queue an untagged opcode's messages go to, and
// false for tagged or unknown opcodes.
func (o Opcode) QN() (uint32, bool) {
	switch o {
	case OpSend, OpSendInv, OpSendSE, OpSendSEInv, OpImmediate, OpImmediateSE:
		return QNSend, true
	case OpReadRequest, OpAtomicRequest:
		return QNReadRequest, true
	case OpTerminate:
		return QNTerminate, true
	case OpAtomicResponse:
		return QNAtomicResponse, true
	}
	return 0, false
}

// Control-byte fields.
const (
	CtrlTagged   = 0x80 // c0 T
	CtrlLast     = 0x40 // c0 L
	CtrlDVMask   = 0x03 // c0 DDP version
	CtrlRVShift  = 6    // c1 RDMAP version, bits 7..6
	CtrlOpMask   = 0x0F // c1 opcode
	DDPVersion   = 1
	RDMAPVersion = 1
)

// FPDU header sizes, counting the 2-byte ULPDU_Length. For the fixed-size
// messages (Read Request, Immediate Data, Atomic Request/Response) the body
// counts as header, so HeaderLen covers the whole ULPDU; a Terminate's
// attached headers come after TerminateHeaderLen.
const (
	TaggedHeaderLen    = 16 // 2 + 14-byte tagged DDP header
	UntaggedHeaderLen  = 20 // 2 + 18-byte untagged DDP header
	ReadRequestLen     = 48 // untagged header + 28-byte Read Request body
	TerminateHeaderLen = 24 // untagged header + 4-byte Terminate control
	ImmediateLen       = 28 // untagged header + 8 bytes of immediate data
	AtomicRequestLen   = 72 // untagged header + 52-byte Atomic Request body
	AtomicResponseLen  = 32 // untagged header + 12-byte Atomic Response body

	TaggedDDPLen   = TaggedHeaderLen - MPALenLen   // 14: a tagged DDP header without the MPA length
	UntaggedDDPLen = UntaggedHeaderLen - MPALenLen // 18

	ReadRequestULPDULen    = ReadRequestLen - MPALenLen     // 46 (0x002E)
	TerminateMinULPDULen   = TerminateHeaderLen - MPALenLen // 22
	ImmediateULPDULen      = ImmediateLen - MPALenLen       // 26
	AtomicRequestULPDULen  = AtomicRequestLen - MPALenLen   // 70
	AtomicResponseULPDULen = AtomicResponseLen - MPALenLen  // 30
)

// fixedLen returns the FPDU header size of opcode o (see HeaderLen) and
// whether its messages have exactly that size.
func (o Opcode) fixedLen() (n int, exact bool) {
	switch o {
	case OpWrite, OpReadResponse:
		return TaggedHeaderLen, false
	case OpReadRequest:
		return ReadRequestLen, true
	case OpTerminate:
		return TerminateHeaderLen, false
	case OpImmediate, OpImmediateSE:
		return ImmediateLen, true
	case OpAtomicRequest:
		return AtomicRequestLen, true
	case OpAtomicResponse:
		return AtomicResponseLen, true
	}
	return UntaggedHeaderLen, false
}

// Ctrl returns the two control bytes of a segment of an op message: DV and
// RV 1, T set for the tagged opcodes, L set when last.
func Ctrl(op Opcode, last bool) (c0, c1 byte) {
	c0 = DDPVersion
	if op.Tagged() {
		c0 |= CtrlTagged
	}
	if last {
		c0 |= CtrlLast
	}
	return c0, RDMAPVersion<<CtrlRVShift | byte(op)&CtrlOpMask
}

// HeaderLen tells how many FPDU header bytes (ULPDU_Length included) follow
// from the control bytes c0, c1, so that a stream reader can read exactly
// the header and place the payload directly. The length follows the opcode,
// as in siw: 16 for Write and Read Response, 48 for Read Request, 24 for
// Terminate, 28 for Immediate Data, 72 and 32 for Atomic Request and
// Response, 20 for the Sends. For an unknown opcode it follows the T bit
// (16 or 20).
//
// The length is always usable; err is non-nil (a *TermError naming the
// Terminate to send) when the control bytes are invalid: bad DDP version,
// bad RDMAP version, opcode above 0xB, or a T bit that contradicts the
// opcode. RFC 7306 opcodes are not refused here; Check decides on them.
func HeaderLen(c0, c1 byte) (int, error) {
	op := Opcode(c1 & CtrlOpMask)
	tagged := c0&CtrlTagged != 0
	n := UntaggedHeaderLen
	if op.Known(true) {
		n, _ = op.fixedLen()
	} else if tagged {
		n = TaggedHeaderLen
	}
	if t := checkCtrl(c0, c1, true); t != nil {
		return n, t
	}
	return n, nil
}

// checkCtrl validates the control bytes in siw's order: DDP version, RDMAP
// version, opcode; then the T bit against the opcode.
func checkCtrl(c0, c1 byte, ext bool) *TermError {
	tagged := c0&CtrlTagged != 0
	if c0&CtrlDVMask != DDPVersion {
		if tagged {
			return &TermError{Layer: LayerDDP, EType: uint8(DDPTagged), Code: uint8(DDPTagBadVersion)}
		}
		return &TermError{Layer: LayerDDP, EType: uint8(DDPUntagged), Code: uint8(DDPUntagBadVersion)}
	}
	if c1>>CtrlRVShift != RDMAPVersion {
		return &TermError{Layer: LayerRDMAP, EType: uint8(RDMAPRemoteOperation), Code: uint8(RDMAPBadVersion)}
	}
	op := Opcode(c1 & CtrlOpMask)
	if !op.Known(ext) || op.Tagged() != tagged {
		return &TermError{Layer: LayerRDMAP, EType: uint8(RDMAPRemoteOperation), Code: uint8(RDMAPUnexpectedOpcode)}
	}
	return nil
}

func putLen(b []byte, ulpduLen int) {
	if ulpduLen < 0 || ulpduLen > MaxULPDULen {
		panic("wire: ULPDU length " + strconv.Itoa(ulpduLen) + " out of range")
	}
	binary.BigEndian.PutUint16(b, uint16(ulpduLen))
}

// PutTagged writes a 16-byte tagged FPDU header to b: ULPDU_Length, control
// bytes for op (T=1, DV=RV=1, L as given), STag and TO. ulpduLen is the DDP
// segment size: TaggedDDPLen plus the payload. It panics if b is shorter
// than TaggedHeaderLen or ulpduLen is outside 0..65535.
func PutTagged(b []byte, op Opcode, last bool, stag uint32, to uint64, ulpduLen int) {
	_ = b[TaggedHeaderLen-1]
	putLen(b, ulpduLen)
	c0, c1 := Ctrl(op, last)
	b[2], b[3] = c0|CtrlTagged, c1
	binary.BigEndian.PutUint32(b[4:8], stag)
	binary.BigEndian.PutUint64(b[8:16], to)
}

// PutUntagged writes a 20-byte untagged FPDU header to b: ULPDU_Length,
// control bytes for op (T=0, DV=RV=1, L as given), RsvdULP (the Invalidate
// STag for Send with Invalidate, else 0), QN, MSN and MO. ulpduLen is the
// DDP segment size: UntaggedDDPLen plus what follows the header. It panics
// if b is shorter than UntaggedHeaderLen or ulpduLen is outside 0..65535.
func PutUntagged(b []byte, op Opcode, last bool, rsvd, qn, msn, mo uint32, ulpduLen int) {
	_ = b[UntaggedHeaderLen-1]
	putLen(b, ulpduLen)
	c0, c1 := Ctrl(op, last)
	b[2], b[3] = c0&^CtrlTagged, c1
	binary.BigEndian.PutUint32(b[4:8], rsvd)
	binary.BigEndian.PutUint32(b[8:12], qn)
	binary.BigEndian.PutUint32(b[12:16], msn)
	binary.BigEndian.PutUint32(b[16:20], mo)
}

// Header is a view of an FPDU header, starting at the ULPDU_Length field.
// The accessors never panic: a field that the slice is too short to hold
// reads as zero. They do not check that the field applies to the header's
// buffer model (use Check).
type Header []byte

// ULPDULen returns the MPA ULPDU_Length: the DDP segment size.
func (h Header) ULPDULen() int {
	if len(h) < 2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(h))
}

// C0 returns the DDP control byte.
func (h Header) C0() byte {
	if len(h) < 3 {
		return 0
	}
	return h[2]
}

// C1 returns the RDMAP control byte.
func (h Header) C1() byte {
	if len(h) < 4 {
		return 0
	}
	return h[3]
}

// Tagged reports the T bit.
func (h Header) Tagged() bool { return h.C0()&CtrlTagged != 0 }

// Last reports the L bit.
func (h Header) Last() bool { return h.C0()&CtrlLast != 0 }

// DDPVersion returns DV.
func (h Header) DDPVersion() uint8 { return h.C0() & CtrlDVMask }

// RDMAPVersion returns RV.
func (h Header) RDMAPVersion() uint8 { return h.C1() >> CtrlRVShift }

// Opcode returns the RDMAP opcode.
func (h Header) Opcode() Opcode { return Opcode(h.C1() & CtrlOpMask) }

// Len returns the FPDU header size its control bytes call for (HeaderLen),
// or 0 if the slice does not reach the control bytes.
func (h Header) Len() int {
	if len(h) < 4 {
		return 0
	}
	n, _ := HeaderLen(h[2], h[3])
	return n
}

// STag returns a tagged header's Data Sink STag.
func (h Header) STag() uint32 { return u32At(h, 4) }

// TO returns a tagged header's Tagged Offset.
func (h Header) TO() uint64 {
	return u64At(h, 8)
}

// InvSTag returns an untagged header's RsvdULP field: the STag to
// invalidate for Send with Invalidate, otherwise 0.
func (h Header) InvSTag() uint32 { return u32At(h, 4) }

// QN returns an untagged header's queue number.
func (h Header) QN() uint32 { return u32At(h, 8) }

// MSN returns an untagged header's message sequence number.
func (h Header) MSN() uint32 { return u32At(h, 12) }

// MO returns an untagged header's message offset.
func (h Header) MO() uint32 { return u32At(h, 16) }

// DDP returns the DDP header without the MPA length: 14 bytes when tagged,
// 18 when untagged (as attached to a Terminate), or nil if h is too short.
func (h Header) DDP() []byte {
	n := UntaggedHeaderLen
	if h.Tagged() {
		n = TaggedHeaderLen
	}
	if len(h) < n {
		return nil
	}
	return h[MPALenLen:n:n]
}

func (h Header) body(n int) []byte {
	if len(h) < UntaggedHeaderLen+n {
		return nil
	}
	return h[UntaggedHeaderLen : UntaggedHeaderLen+n : UntaggedHeaderLen+n]
}

// ReadRequest returns the Read Request body, or nil if h is too short.
func (h Header) ReadRequest() ReadRequest { return ReadRequest(h.body(ReadRequestBodyLen)) }

// Immediate returns the Immediate Data body, or nil if h is too short.
func (h Header) Immediate() Immediate { return Immediate(h.body(ImmediateBodyLen)) }

// AtomicRequest returns the Atomic Request body, or nil if h is too short.
func (h Header) AtomicRequest() AtomicRequest {
	return AtomicRequest(h.body(AtomicRequestBodyLen))
}

// AtomicResponse returns the Atomic Response body, or nil if h is too short.
func (h Header) AtomicResponse() AtomicResponse {
	return AtomicResponse(h.body(AtomicResponseBodyLen))
}
