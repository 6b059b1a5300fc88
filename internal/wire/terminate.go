package wire

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// Terminate message (RFC 5040 section 4.8) and its error codes (RFC 5040,
// RFC 5041, RFC 5044, RFC 6581; docs/iwarp-wire.md section 7).

// Layer is the Terminate control word's Layer field.
type Layer uint8

// Layers.
const (
	LayerRDMAP Layer = 0
	LayerDDP   Layer = 1
	LayerLLP   Layer = 2 // MPA
)

// String names the layer.
func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return "Layer(" + strconv.Itoa(int(l)) + ")"
}

// RDMAPEType is the error type of an RDMAP-layer Terminate.
type RDMAPEType uint8

// RDMAP error types.
const (
	RDMAPLocalCatastrophic RDMAPEType = 0
	RDMAPRemoteProtection  RDMAPEType = 1
	RDMAPRemoteOperation   RDMAPEType = 2
)

// String names the error type.
func (e RDMAPEType) String() string {
	switch e {
	case RDMAPLocalCatastrophic:
		return "local catastrophic"
	case RDMAPRemoteProtection:
		return "remote protection"
	case RDMAPRemoteOperation:
		return "remote operation"
	}
	return "RDMAPEType(" + strconv.Itoa(int(e)) + ")"
}

// RDMAPCode is the error code of an RDMAP-layer Terminate. 0x00..0x04 are
// remote protection codes, 0x05..0x08 remote operation codes; 0x09 and 0xFF
// occur under both.
type RDMAPCode uint8

// RDMAP error codes.
const (
	RDMAPInvalidSTag        RDMAPCode = 0x00
	RDMAPBaseBounds         RDMAPCode = 0x01
	RDMAPAccessRights       RDMAPCode = 0x02
	RDMAPSTagNotAssociated  RDMAPCode = 0x03 // STag not associated with the RDMAP stream (PD mismatch)
	RDMAPTOWrap             RDMAPCode = 0x04
	RDMAPBadVersion         RDMAPCode = 0x05
	RDMAPUnexpectedOpcode   RDMAPCode = 0x06
	RDMAPCatastrophicStream RDMAPCode = 0x07
	RDMAPCatastrophicGlobal RDMAPCode = 0x08
	RDMAPSTagNotInvalidated RDMAPCode = 0x09 // STag cannot be invalidated
	RDMAPUnspecified        RDMAPCode = 0xFF
)

// String names the error code.
func (c RDMAPCode) String() string {
	switch c {
	case RDMAPInvalidSTag:
		return "invalid STag"
	case RDMAPBaseBounds:
		return "base or bounds violation"
	case RDMAPAccessRights:
		return "access rights violation"
	case RDMAPSTagNotAssociated:
		return "STag not associated with RDMAP stream"
	case RDMAPTOWrap:
		return "TO wrap"
	case RDMAPBadVersion:
		return "invalid RDMAP version"
	case RDMAPUnexpectedOpcode:
		return "unexpected opcode"
	case RDMAPCatastrophicStream:
		return "catastrophic error, localized to RDMAP stream"
	case RDMAPCatastrophicGlobal:
		return "catastrophic error, global"
	case RDMAPSTagNotInvalidated:
		return "STag cannot be invalidated"
	case RDMAPUnspecified:
		return "unspecified error"
	}
	return "RDMAPCode(0x" + strconv.FormatUint(uint64(c), 16) + ")"
}

// DDPEType is the error type of a DDP-layer Terminate.
type DDPEType uint8

// DDP error types.
const (
	DDPCatastrophic DDPEType = 0 // code 0x00
	DDPTagged       DDPEType = 1 // codes DDPTaggedCode
	DDPUntagged     DDPEType = 2 // codes DDPUntaggedCode
)

// String names the error type.
func (e DDPEType) String() string {
	switch e {
	case DDPCatastrophic:
		return "local catastrophic"
	case DDPTagged:
		return "tagged buffer"
	case DDPUntagged:
		return "untagged buffer"
	}
	return "DDPEType(" + strconv.Itoa(int(e)) + ")"
}

// DDPCatastrophicCode is the only code of DDPCatastrophic.
const DDPCatastrophicCode = 0x00

// DDPTaggedCode is the error code of a DDP tagged-buffer Terminate.
type DDPTaggedCode uint8

// DDP tagged-buffer error codes.
const (
	DDPTagInvalidSTag       DDPTaggedCode = 0x00
	DDPTagBaseBounds        DDPTaggedCode = 0x01
	DDPTagSTagNotAssociated DDPTaggedCode = 0x02
	DDPTagTOWrap            DDPTaggedCode = 0x03
	DDPTagBadVersion        DDPTaggedCode = 0x04
)

// String names the error code.
func (c DDPTaggedCode) String() string {
	switch c {
	case DDPTagInvalidSTag:
		return "invalid STag"
	case DDPTagBaseBounds:
		return "base or bounds violation"
	case DDPTagSTagNotAssociated:
		return "STag not associated with DDP stream"
	case DDPTagTOWrap:
		return "TO wrap"
	case DDPTagBadVersion:
		return "invalid DDP version"
	}
	return "DDPTaggedCode(0x" + strconv.FormatUint(uint64(c), 16) + ")"
}

// DDPUntaggedCode is the error code of a DDP untagged-buffer Terminate.
type DDPUntaggedCode uint8

// DDP untagged-buffer error codes.
const (
	DDPUntagInvalidQN  DDPUntaggedCode = 0x01
	DDPUntagNoBuffer   DDPUntaggedCode = 0x02 // invalid MSN: no buffer available
	DDPUntagMSNRange   DDPUntaggedCode = 0x03 // invalid MSN: MSN range not valid
	DDPUntagInvalidMO  DDPUntaggedCode = 0x04
	DDPUntagTooLong    DDPUntaggedCode = 0x05 // message too long for the buffer
	DDPUntagBadVersion DDPUntaggedCode = 0x06
)

// String names the error code.
func (c DDPUntaggedCode) String() string {
	switch c {
	case DDPUntagInvalidQN:
		return "invalid QN"
	case DDPUntagNoBuffer:
		return "invalid MSN - no buffer available"
	case DDPUntagMSNRange:
		return "invalid MSN - MSN range is not valid"
	case DDPUntagInvalidMO:
		return "invalid MO"
	case DDPUntagTooLong:
		return "DDP message too long for available buffer"
	case DDPUntagBadVersion:
		return "invalid DDP version"
	}
	return "DDPUntaggedCode(0x" + strconv.FormatUint(uint64(c), 16) + ")"
}

// LLPEType is the error type of an LLP-layer Terminate.
type LLPEType uint8

// LLPMPA is the only LLP error type.
const LLPMPA LLPEType = 0

// String names the error type.
func (e LLPEType) String() string {
	if e == LLPMPA {
		return "MPA"
	}
	return "LLPEType(" + strconv.Itoa(int(e)) + ")"
}

// MPACode is the error code of an LLP/MPA Terminate.
type MPACode uint8

// MPA error codes (RFC 5044; 0x06 and 0x07 from RFC 6581).
const (
	MPAStreamLost        MPACode = 0x01 // TCP connection closed, terminated or lost
	MPACRCError          MPACode = 0x02
	MPAMarkerMismatch    MPACode = 0x03 // marker and ULPDU_Length mismatch
	MPAInvalidReqRep     MPACode = 0x04 // invalid MPA Request or Reply frame
	MPALocalCatastrophic MPACode = 0x05
	MPAInsufficientIRD   MPACode = 0x06
	MPANoMatchingRTR     MPACode = 0x07
)

// String names the error code.
func (c MPACode) String() string {
	switch c {
	case MPAStreamLost:
		return "TCP connection closed, terminated or lost"
	case MPACRCError:
		return "MPA CRC error"
	case MPAMarkerMismatch:
		return "MPA marker and ULPDU length mismatch"
	case MPAInvalidReqRep:
		return "invalid MPA Request or Reply frame"
	case MPALocalCatastrophic:
		return "local catastrophic error"
	case MPAInsufficientIRD:
		return "insufficient IRD resources"
	case MPANoMatchingRTR:
		return "no matching RTR option"
	}
	return "MPACode(0x" + strconv.FormatUint(uint64(c), 16) + ")"
}

// TermError is a Terminate cause: Layer, error type and error code. Use the
// constructors to build one from typed constants. It implements error.
type TermError struct {
	Layer Layer
	EType uint8 // RDMAPEType, DDPEType or LLPEType, by Layer
	Code  uint8 // RDMAPCode, DDPTaggedCode, DDPUntaggedCode or MPACode, by Layer and EType
}

// TermRDMAP returns an RDMAP-layer cause.
func TermRDMAP(e RDMAPEType, c RDMAPCode) TermError {
	return TermError{Layer: LayerRDMAP, EType: uint8(e), Code: uint8(c)}
}

// TermDDPTagged returns a DDP tagged-buffer cause.
func TermDDPTagged(c DDPTaggedCode) TermError {
	return TermError{Layer: LayerDDP, EType: uint8(DDPTagged), Code: uint8(c)}
}

// TermDDPUntagged returns a DDP untagged-buffer cause.
func TermDDPUntagged(c DDPUntaggedCode) TermError {
	return TermError{Layer: LayerDDP, EType: uint8(DDPUntagged), Code: uint8(c)}
}

// TermDDPCatastrophic returns the DDP local catastrophic cause.
func TermDDPCatastrophic() TermError {
	return TermError{Layer: LayerDDP, EType: uint8(DDPCatastrophic), Code: DDPCatastrophicCode}
}

// TermMPA returns an LLP/MPA cause.
func TermMPA(c MPACode) TermError {
	return TermError{Layer: LayerLLP, EType: uint8(LLPMPA), Code: uint8(c)}
}

// Catastrophic reports whether the cause is a local catastrophic error of
// RDMAP or DDP, which siw sends without any attached header.
func (e TermError) Catastrophic() bool {
	return (e.Layer == LayerRDMAP || e.Layer == LayerDDP) && e.EType == 0
}

// String names the layer, error type and code.
func (e TermError) String() string {
	var et, code string
	switch e.Layer {
	case LayerRDMAP:
		et, code = RDMAPEType(e.EType).String(), RDMAPCode(e.Code).String()
	case LayerDDP:
		et = DDPEType(e.EType).String()
		switch DDPEType(e.EType) {
		case DDPTagged:
			code = DDPTaggedCode(e.Code).String()
		case DDPUntagged:
			code = DDPUntaggedCode(e.Code).String()
		default:
			code = "0x" + strconv.FormatUint(uint64(e.Code), 16)
		}
	case LayerLLP:
		et = LLPEType(e.EType).String()
		if LLPEType(e.EType) == LLPMPA {
			code = MPACode(e.Code).String()
		} else {
			code = "0x" + strconv.FormatUint(uint64(e.Code), 16)
		}
	default:
		et = strconv.Itoa(int(e.EType))
		code = "0x" + strconv.FormatUint(uint64(e.Code), 16)
	}
	return e.Layer.String() + "/" + et + "/" + code
}

// Error implements error.
func (e *TermError) Error() string { return "iwarp terminate: " + e.String() }

// Terminate control word bits (byte 22 of the FPDU), RFC order.
const (
	TermFlagM = 0x80 // DDP Segment Length valid
	TermFlagD = 0x40 // DDP header included
	TermFlagR = 0x20 // RDMAP header included

	// The same bits as siw's little-endian C bitfield puts them on x86
	// (docs/iwarp-wire.md section 7.1 caveat): receive side only.
	siwFlagM = 0x01
	siwFlagD = 0x02
	siwFlagR = 0x04
)

// Terminate is a Terminate message to encode.
type Terminate struct {
	MSN   uint32 // QN 2 sequence: 1 for the first (and normally only) Terminate
	Cause TermError

	SegLenValid bool   // M
	SegLen      uint16 // DDP Segment Length of the offending segment; sent when DDPHdr is
	DDPHdr      []byte // offending DDP header without MPA length (14 or 18 bytes); D=1 when present
	RDMAPHdr    []byte // offending RDMAP header (the 28-byte Read Request body); R=1 when present
}

// ErrTerminate is returned for a Terminate that cannot be encoded or parsed.
var ErrTerminate = errors.New("malformed Terminate")

// ULPDULen returns the ULPDU_Length of the encoded message.
func (t *Terminate) ULPDULen() int {
	n := TerminateMinULPDULen + len(t.RDMAPHdr)
	if len(t.DDPHdr) > 0 {
		n += 2 + len(t.DDPHdr)
	}
	return n
}

// AppendTerminate appends the Terminate FPDU without its trailer (finish it
// with FinishFPDU): untagged header (L=1, QN 2, t.MSN, MO 0), the control
// word in RFC bit order (Layer in the high nibble of the first byte, EType
// in the low nibble, then the code, then M/D/R as 0x80/0x40/0x20), then the
// DDP Segment Length and DDP header when DDPHdr is set, then RDMAPHdr.
//
// Errors: ErrTerminate when DDPHdr is not 0, 14 or 18 bytes, RDMAPHdr is
// longer than AtomicRequestBodyLen, or a Layer/EType exceeds 4 bits. dst is
// then returned unchanged.
func AppendTerminate(dst []byte, t *Terminate) ([]byte, error) {
	switch len(t.DDPHdr) {
	case 0, TaggedDDPLen, UntaggedDDPLen:
	default:
		return dst, ErrTerminate
	}
	if len(t.RDMAPHdr) > AtomicRequestBodyLen || t.Cause.Layer > 0xF || t.Cause.EType > 0xF {
		return dst, ErrTerminate
	}
	n := len(dst)
	dst = append(dst, make([]byte, TerminateHeaderLen)...)
	PutUntagged(dst[n:], OpTerminate, true, 0, QNTerminate, t.MSN, 0, t.ULPDULen())
	flags := byte(0)
	if t.SegLenValid {
		flags |= TermFlagM
	}
	if len(t.DDPHdr) > 0 {
		flags |= TermFlagD
	}
	if len(t.RDMAPHdr) > 0 {
		flags |= TermFlagR
	}
	dst[n+20] = byte(t.Cause.Layer)<<4 | t.Cause.EType
	dst[n+21] = t.Cause.Code
	dst[n+22] = flags
	dst[n+23] = 0
	if len(t.DDPHdr) > 0 {
		dst = binary.BigEndian.AppendUint16(dst, t.SegLen)
		dst = append(dst, t.DDPHdr...)
	}
	return append(dst, t.RDMAPHdr...), nil
}

// TerminateFor builds the Terminate that reports cause for the offending
// FPDU whose header is off (nil when there is none), attaching what siw
// attaches (docs/iwarp-wire.md section 7.1):
//   - local catastrophic (RDMAP or DDP) and LLP causes: nothing;
//   - DDP tagged/untagged causes: M, D, the segment length and the DDP header;
//   - RDMAP causes on a Read Request: M, D, R, the DDP header and the Read
//     Request body; on any other message: M, D and the DDP header.
//
// The DDP Segment Length written is the offending ULPDU_Length (the RFC's
// DDP segment). siw writes the payload length instead (ULPDU_Length minus
// its header); receivers should only log it. The attachments alias off.
func TerminateFor(msn uint32, cause TermError, off Header) Terminate {
	t := Terminate{MSN: msn, Cause: cause}
	if cause.Catastrophic() || cause.Layer >= LayerLLP {
		return t
	}
	ddp := off.DDP()
	if ddp == nil {
		return t
	}
	t.SegLenValid = true
	t.SegLen = uint16(off.ULPDULen())
	t.DDPHdr = ddp
	if cause.Layer == LayerRDMAP && !off.Tagged() && off.Opcode() == OpReadRequest {
		if rr := off.ReadRequest(); rr != nil {
			t.RDMAPHdr = rr
		}
	}
	return t
}

// TermFields is one reading of a received Terminate control word.
type TermFields struct {
	Cause   TermError
	M, D, R bool
}

// TerminateInfo is a received Terminate, parsed leniently.
type TerminateInfo struct {
	QN, MSN, MO uint32

	// RFC is the control word read in RFC 5040 bit order; Swapped is the
	// same bytes read the way siw's C bitfield lays them out on
	// little-endian hosts (Layer and EType nibbles swapped; M/D/R at
	// 0x01/0x02/0x04 of the third byte). Log both; decide nothing on
	// either. A Terminate is fatal to the connection whatever it says.
	RFC     TermFields
	Swapped TermFields

	// The attached data, located as ParseTerminate describes (from the
	// bytes present and either reading of D and R). All alias the parsed
	// slice.
	SegLen   uint16 // valid when DDPHdr != nil
	DDPHdr   []byte // 14 or 18 bytes, per the T bit of its first byte
	RDMAPHdr []byte // whatever follows the DDP header
}

// ParseTerminate parses a Terminate FPDU h (from its ULPDU_Length field; a
// trailer after the ULPDU is ignored). It checks neither the opcode nor QN,
// MSN or MO: that is Check's and the provider's job. The attachments are
// located from the bytes present, so that either bit order works: a DDP
// Segment Length and DDP header when they fit after the control word and
// either reading sets D or the candidate header carries DV = RV = 1 (its
// length, 14 or 18, by its T bit); then, when a DDP header was found or
// either reading sets R, an RDMAP header from whatever remains.
//
// Errors: ErrTerminate when h holds fewer than 24 bytes.
func ParseTerminate(h Header) (TerminateInfo, error) {
	if len(h) < TerminateHeaderLen {
		return TerminateInfo{}, ErrTerminate
	}
	end := min(len(h), MPALenLen+h.ULPDULen())
	end = max(end, TerminateHeaderLen)
	b20, b21, b22 := h[20], h[21], h[22]
	ti := TerminateInfo{
		QN: h.QN(), MSN: h.MSN(), MO: h.MO(),
		RFC: TermFields{
			Cause: TermError{Layer: Layer(b20 >> 4), EType: b20 & 0xF, Code: b21},
			M:     b22&TermFlagM != 0, D: b22&TermFlagD != 0, R: b22&TermFlagR != 0,
		},
		Swapped: TermFields{
			Cause: TermError{Layer: Layer(b20 & 0xF), EType: b20 >> 4, Code: b21},
			M:     b22&siwFlagM != 0, D: b22&siwFlagD != 0, R: b22&siwFlagR != 0,
		},
	}
	rest := h[TerminateHeaderLen:end:end]
	if len(rest) >= 2+TaggedDDPLen && (ti.RFC.D || ti.Swapped.D ||
		rest[2]&CtrlDVMask == DDPVersion && rest[3]>>CtrlRVShift == RDMAPVersion) {
		n := UntaggedDDPLen
		if rest[2]&CtrlTagged != 0 {
			n = TaggedDDPLen
		}
		if len(rest) >= 2+n {
			ti.SegLen = binary.BigEndian.Uint16(rest)
			ti.DDPHdr = rest[2 : 2+n : 2+n]
			rest = rest[2+n:]
		}
	}
	if len(rest) > 0 && (ti.DDPHdr != nil || ti.RFC.R || ti.Swapped.R) {
		ti.RDMAPHdr = rest
	}
	return ti, nil
}
