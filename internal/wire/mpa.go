package wire

import (
	"encoding/binary"
	"errors"
)

// MPA Request/Reply frame (RFC 5044 section 7.1, RFC 6581 section 5).

// MPA keys: the first 16 bytes of a Request and of a Reply frame.
const (
	MPAKeyRequest = "MPA ID Req Frame"
	MPAKeyReply   = "MPA ID Rep Frame"
	MPAKeyLen     = 16
)

// MPA frame flag bits (byte 16 of the frame).
const (
	MPAFlagMarkers  = 0x80 // M: markers wanted; never honoured, a request with it is rejected
	MPAFlagCRC      = 0x40 // C: CRC32C on FPDUs
	MPAFlagReject   = 0x20 // R: reject (Reply only)
	MPAFlagEnhanced = 0x10 // RFC 6581 enhanced connection establishment (first "Res" bit)
	MPAFlagSiwGSO   = 0x08 // siw-private "GSO_EXP" bit; never set it
	MPAFlagReserved = 0x0F // the bits RFC 6581 leaves reserved (MPAFlagSiwGSO included)
)

// MPA sizes and limits.
const (
	MPAHeaderLen = 20 // key, flags, rev, PD_Length
	MPAV2Len     = 4  // RFC 6581 IRD/ORD block at the start of the private data

	MPAMaxPrivate    = 512 // RFC 5044 limit on PD_Length
	SiwMaxPrivate    = 256 // siw drops a frame with a larger PD_Length (RDMA_MAX_PRIVATE_DATA)
	SiwMaxULPPrivate = 251 // ULP private data that fits siw's u8 length with the v2 block (4+251 <= 255)

	MPAMaxIRDORD     = 0x3FFF // IRD and ORD are 14-bit fields
	DefaultMaxIRDORD = 128    // siw's SIW_MAX_IRD_QP / SIW_MAX_ORD_QP
)

// MPA revisions.
const (
	MPARev0 = 0 // pre-RFC draft; siw accepts it as responder and echoes it
	MPARev1 = 1 // RFC 5044
	MPARev2 = 2 // RFC 6581 enhanced
)

// RFC 6581 v2-block bits: A and B sit in the IRD word, C and D in the ORD word.
const (
	v2P2P      = 0x8000 // A (IRD word): peer-to-peer, an RTR exchange is wanted
	v2SendRTR  = 0x4000 // B (IRD word): zero-length Send is an acceptable RTR
	v2WriteRTR = 0x8000 // C (ORD word): zero-length RDMA Write is an acceptable RTR
	v2ReadRTR  = 0x4000 // D (ORD word): zero-length RDMA Read is an acceptable RTR
	v2Mask     = 0x3FFF
)

// RTR is a set of RFC 6581 ready-to-receive message kinds. In a frame it is
// the set offered (request) or chosen (reply); in Negotiated it holds the one
// kind to send or to wait for, or none.
type RTR uint8

// RTR kinds.
const (
	RTRSend  RTR = 1 << iota // B: zero-length Send
	RTRWrite                 // C: zero-length RDMA Write (STag 1, TO 0)
	RTRRead                  // D: zero-length RDMA Read Request
)

// String lists the RTR kinds in the set.
func (r RTR) String() string {
	if r == 0 {
		return "none"
	}
	s := ""
	for _, k := range []struct {
		b RTR
		n string
	}{{RTRWrite, "write"}, {RTRRead, "read"}, {RTRSend, "send"}} {
		if r&k.b != 0 {
			if s != "" {
				s += "|"
			}
			s += k.n
		}
	}
	if r&^(RTRSend|RTRWrite|RTRRead) != 0 {
		if s != "" {
			s += "|"
		}
		s += "?"
	}
	return s
}

// MPA frame errors. ParseMPA, AppendMPA and the negotiation functions return
// these (possibly wrapped); test with errors.Is.
var (
	ErrMPATruncated      = errors.New("MPA frame truncated")
	ErrMPATrailing       = errors.New("bytes after the MPA private data")
	ErrMPAKey            = errors.New("MPA key is not the expected Request/Reply key")
	ErrMPARevision       = errors.New("unsupported MPA revision")
	ErrMPAPrivateTooLong = errors.New("MPA private data too long")
	ErrMPAEnhancedShort  = errors.New("enhanced MPA frame with PD_Length < 4")
	ErrMPAMarkers        = errors.New("MPA markers requested")
	ErrMPAV2             = errors.New("MPA v2 block needs revision 2 and the Enhanced flag")
	ErrMPARejected       = errors.New("MPA peer rejected the connection")
	ErrMPANotEnhanced    = errors.New("MPA reply is not an enhanced revision 2 frame")
	ErrIRDORDRange       = errors.New("IRD/ORD out of range")
	ErrInsufficientIRD   = errors.New("insufficient IRD for the peer's ORD")
	ErrNoMatchingRTR     = errors.New("no matching RTR option")
)

// MPAFrame is a decoded MPA Request or Reply frame.
//
// The RFC 6581 block (P2P, RTR, IRD, ORD) is on the wire only when V2 is
// true, which requires Rev 2 and Enhanced. Private is the ULP private data,
// without the v2 block; ParseMPA makes it alias the parsed frame.
type MPAFrame struct {
	Reply    bool  // key "MPA ID Rep Frame" (else "MPA ID Req Frame")
	Markers  bool  // M
	CRC      bool  // C
	Reject   bool  // R
	Enhanced bool  // the RFC 6581 flag bit, as sent or received
	Reserved uint8 // the low four flag bits (MPAFlagReserved) as received; send 0
	Rev      uint8

	V2  bool   // the 4-byte IRD/ORD block is present
	P2P bool   // A
	RTR RTR    // B, C, D
	IRD uint16 // 14 bits
	ORD uint16 // 14 bits

	Private []byte
}

// Flags returns the frame's flag byte.
func (f *MPAFrame) Flags() uint8 {
	b := f.Reserved & MPAFlagReserved
	if f.Markers {
		b |= MPAFlagMarkers
	}
	if f.CRC {
		b |= MPAFlagCRC
	}
	if f.Reject {
		b |= MPAFlagReject
	}
	if f.Enhanced {
		b |= MPAFlagEnhanced
	}
	return b
}

// PDLen returns the frame's PD_Length: the ULP private data plus the v2 block.
func (f *MPAFrame) PDLen() int {
	n := len(f.Private)
	if f.V2 {
		n += MPAV2Len
	}
	return n
}

// Len returns the encoded size of the frame.
func (f *MPAFrame) Len() int { return MPAHeaderLen + f.PDLen() }

// AppendMPA appends the encoded frame to dst.
//
// Errors: ErrMPARevision (Rev > 2), ErrMPAV2 (V2 without Rev 2 and
// Enhanced), ErrIRDORDRange (IRD or ORD above 0x3FFF), ErrMPAPrivateTooLong
// (PD_Length above MPAMaxPrivate). On error dst is returned unchanged.
func AppendMPA(dst []byte, f *MPAFrame) ([]byte, error) {
	if f.Rev > MPARev2 {
		return dst, ErrMPARevision
	}
	if f.V2 && (f.Rev != MPARev2 || !f.Enhanced) {
		return dst, ErrMPAV2
	}
	if f.V2 && (f.IRD > MPAMaxIRDORD || f.ORD > MPAMaxIRDORD) {
		return dst, ErrIRDORDRange
	}
	pd := f.PDLen()
	if pd > MPAMaxPrivate {
		return dst, ErrMPAPrivateTooLong
	}
	if f.Reply {
		dst = append(dst, MPAKeyReply...)
	} else {
		dst = append(dst, MPAKeyRequest...)
	}
	dst = append(dst, f.Flags(), f.Rev, byte(pd>>8), byte(pd))
	if f.V2 {
		ird, ord := f.IRD&v2Mask, f.ORD&v2Mask
		if f.P2P {
			ird |= v2P2P
		}
		if f.RTR&RTRSend != 0 {
			ird |= v2SendRTR
		}
		if f.RTR&RTRWrite != 0 {
			ord |= v2WriteRTR
		}
		if f.RTR&RTRRead != 0 {
			ord |= v2ReadRTR
		}
		dst = binary.BigEndian.AppendUint16(dst, ird)
		dst = binary.BigEndian.AppendUint16(dst, ord)
	}
	return append(dst, f.Private...), nil
}

// ParseMPAHeader decodes the fixed 20-byte header of an MPA frame: which key
// it carries, the flag byte, the revision and PD_Length (the number of bytes
// still to read). Only h[:20] is examined.
//
// Errors: ErrMPATruncated (fewer than 20 bytes), ErrMPAKey (neither key),
// ErrMPARevision (Rev > 2; siw drops such a frame), ErrMPAPrivateTooLong
// (PD_Length > MPAMaxPrivate). Revisions 0, 1 and 2 are accepted, as siw does.
func ParseMPAHeader(h []byte) (reply bool, flags, rev uint8, pdLen int, err error) {
	if len(h) < MPAHeaderLen {
		return false, 0, 0, 0, ErrMPATruncated
	}
	switch string(h[:MPAKeyLen]) {
	case MPAKeyRequest:
	case MPAKeyReply:
		reply = true
	default:
		return false, 0, 0, 0, ErrMPAKey
	}
	flags, rev = h[16], h[17]
	pdLen = int(binary.BigEndian.Uint16(h[18:20]))
	if rev > MPARev2 {
		return reply, flags, rev, pdLen, ErrMPARevision
	}
	if pdLen > MPAMaxPrivate {
		return reply, flags, rev, pdLen, ErrMPAPrivateTooLong
	}
	return reply, flags, rev, pdLen, nil
}

// ParseMPA decodes a complete MPA frame: exactly 20 + PD_Length bytes. With
// Rev 2 and Enhanced set, the first four private-data bytes are the v2 block
// and Private is what follows; otherwise all private data is ULP data.
// Private aliases frame.
//
// Errors: those of ParseMPAHeader; ErrMPATruncated and ErrMPATrailing when
// frame is shorter or longer than 20 + PD_Length; ErrMPAEnhancedShort for an
// enhanced rev-2 frame with PD_Length < 4 that is not a reject. With
// ErrMPAEnhancedShort the returned frame is still filled in (V2 false,
// Private holding the short private data) so that a responder can build its
// reject Reply from it. A reject Reply with PD_Length < 4 is accepted without
// a v2 block, because siw sends exactly that.
//
// Markers are not a parse error: the frame says M=1 and NegotiateResponder /
// NegotiateInitiator refuse it.
func ParseMPA(frame []byte) (MPAFrame, error) {
	reply, flags, rev, pdLen, err := ParseMPAHeader(frame)
	if err != nil {
		return MPAFrame{}, err
	}
	if len(frame) < MPAHeaderLen+pdLen {
		return MPAFrame{}, ErrMPATruncated
	}
	if len(frame) > MPAHeaderLen+pdLen {
		return MPAFrame{}, ErrMPATrailing
	}
	f := MPAFrame{
		Reply:    reply,
		Markers:  flags&MPAFlagMarkers != 0,
		CRC:      flags&MPAFlagCRC != 0,
		Reject:   flags&MPAFlagReject != 0,
		Enhanced: flags&MPAFlagEnhanced != 0,
		Reserved: flags & MPAFlagReserved,
		Rev:      rev,
	}
	pd := frame[MPAHeaderLen : MPAHeaderLen+pdLen : MPAHeaderLen+pdLen]
	if rev == MPARev2 && f.Enhanced {
		if pdLen < MPAV2Len {
			if pdLen > 0 {
				f.Private = pd
			}
			if f.Reject {
				return f, nil
			}
			return f, ErrMPAEnhancedShort
		}
		ird := binary.BigEndian.Uint16(pd[0:2])
		ord := binary.BigEndian.Uint16(pd[2:4])
		f.V2 = true
		f.P2P = ird&v2P2P != 0
		if ird&v2SendRTR != 0 {
			f.RTR |= RTRSend
		}
		if ord&v2WriteRTR != 0 {
			f.RTR |= RTRWrite
		}
		if ord&v2ReadRTR != 0 {
			f.RTR |= RTRRead
		}
		f.IRD = ird & v2Mask
		f.ORD = ord & v2Mask
		pd = pd[MPAV2Len:]
	}
	if len(pd) > 0 {
		f.Private = pd
	}
	return f, nil
}
