package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// MPA FPDU framing (RFC 5044 section 4, docs/iwarp-wire.md section 4):
//
//	ULPDU_Length (2, BE) | ULPDU | PAD (0..3 zeros) | CRC32C (4, little-endian)
//
// PAD makes 2 + ULPDU_Length + PAD a multiple of 4. The CRC covers
// everything before it; it is always present and is zero (and ignored on
// receive) when CRC was not negotiated.

// FPDU sizes.
const (
	MPALenLen      = 2     // the ULPDU_Length field
	CRCLen         = 4     // the CRC field
	MaxULPDULen    = 65535 // ULPDU_Length is 16 bits
	MaxTrailerLen  = 3 + CRCLen
	maxFPDUAligned = 65536 // the largest 8-aligned FPDU whose ULPDU fits 16 bits (ULPDU 65530)
)

// Pad returns the number of zero bytes that follow a ULPDU of ulpduLen bytes.
func Pad(ulpduLen int) int { return -(MPALenLen + ulpduLen) & 3 }

// FPDULen returns the size on the wire of an FPDU carrying a ULPDU of
// ulpduLen bytes: length field, ULPDU, pad and CRC.
func FPDULen(ulpduLen int) int { return MPALenLen + ulpduLen + Pad(ulpduLen) + CRCLen }

// TrailerLen returns the pad-plus-CRC bytes after a ULPDU of ulpduLen bytes.
func TrailerLen(ulpduLen int) int { return Pad(ulpduLen) + CRCLen }

// MaxPayload returns the payload bytes one FPDU carries when FPDUs are sized
// as siw sizes them: the FPDU (length field through CRC) is the TCP MSS
// rounded down to a multiple of 8, and hdrLen is the FPDU header size
// including the length field (TaggedHeaderLen, UntaggedHeaderLen). For MSS
// 1448 that is 1424 for a Send and 1428 for a Write. The result keeps
// ULPDU_Length within 16 bits and is never negative.
func MaxPayload(mss, hdrLen int) int {
	f := min(mss&^7, maxFPDUAligned)
	return max(f-hdrLen-CRCLen, 0)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC computes the MPA CRC32C (Castagnoli, initial ~0, final inversion)
// incrementally, so that an FPDU's header, payload pieces and pad can be fed
// one slice at a time without being copied together. The zero value is ready
// for use.
type CRC struct{ sum uint32 }

// Reset starts a new checksum.
func (c *CRC) Reset() { c.sum = 0 }

// Update adds b to the checksum.
func (c *CRC) Update(b []byte) { c.sum = crc32.Update(c.sum, castagnoli, b) }

var zeros [3]byte

// UpdatePad adds n (0..3) zero bytes, the FPDU pad, to the checksum.
func (c *CRC) UpdatePad(n int) { c.Update(zeros[:n&3]) }

// Sum returns the checksum of everything added since the last Reset.
func (c *CRC) Sum() uint32 { return c.sum }

// Checksum returns the CRC32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// AppendTrailer appends pad zero bytes and then crc, little-endian. Pass
// crc 0 when CRC is not negotiated.
func AppendTrailer(dst []byte, pad int, crc uint32) []byte {
	dst = append(dst, zeros[:pad&3]...)
	return binary.LittleEndian.AppendUint32(dst, crc)
}

// PutTrailer writes pad zero bytes and crc (little-endian) to b, which must
// hold at least pad+4 bytes, and returns the number of bytes written.
func PutTrailer(b []byte, pad int, crc uint32) int {
	pad &= 3
	copy(b[:pad], zeros[:])
	binary.LittleEndian.PutUint32(b[pad:pad+CRCLen], crc)
	return pad + CRCLen
}

// TrailerCRC returns the CRC stored (little-endian) in the last four bytes of
// an FPDU's trailer, or 0 if trailer is shorter than four bytes.
func TrailerCRC(trailer []byte) uint32 {
	if len(trailer) < CRCLen {
		return 0
	}
	return binary.LittleEndian.Uint32(trailer[len(trailer)-CRCLen:])
}

// FinishFPDU completes an FPDU whose length field and ULPDU are in
// dst[start:]: it appends the pad and the CRC (computed over dst[start:] and
// the pad when crc is true, zero otherwise). The ULPDU_Length field must
// already hold the ULPDU size.
func FinishFPDU(dst []byte, start int, crc bool) []byte {
	pad := Pad(len(dst) - start - MPALenLen)
	var sum uint32
	if crc {
		var c CRC
		c.Update(dst[start:])
		c.UpdatePad(pad)
		sum = c.Sum()
	}
	return AppendTrailer(dst, pad, sum)
}

// CheckFPDU reports whether a complete FPDU (length field through CRC) has a
// consistent length and a CRC matching its contents.
func CheckFPDU(fpdu []byte) bool {
	if len(fpdu) < MPALenLen+CRCLen {
		return false
	}
	n := int(binary.BigEndian.Uint16(fpdu))
	if len(fpdu) != FPDULen(n) {
		return false
	}
	body := fpdu[:len(fpdu)-CRCLen]
	return Checksum(body) == TrailerCRC(fpdu)
}
