package ib

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Management datagrams (IBA 13.4): 256 bytes, a 24-byte common header and
// the class's data. RoCEv2 carries them as UD SENDs to QP1 with this Q_Key.
const (
	MADLen    = 256
	MADHdrLen = 24
	GSIQKey   = 0x80010000
	GSIQPN    = 1

	CMClass        = 0x07 // Communication Management
	CMClassVersion = 2
	MethodSend     = 0x03
)

// CM attribute IDs (IBA 16.7.2).
const (
	AttrREQ     = 0x0010
	AttrMRA     = 0x0011
	AttrREJ     = 0x0012
	AttrREP     = 0x0013
	AttrRTU     = 0x0014
	AttrDREQ    = 0x0015
	AttrDREP    = 0x0016
	AttrSIDRReq = 0x0017
	AttrSIDRRep = 0x0018
)

// MAD is a view of a management datagram.
type MAD []byte

// Class returns the management class.
func (m MAD) Class() uint8 { return m[1] }

// ClassVersion returns the class version.
func (m MAD) ClassVersion() uint8 { return m[2] }

// Method returns the method.
func (m MAD) Method() uint8 { return m[3] }

// TID returns the transaction ID.
func (m MAD) TID() uint64 { return binary.BigEndian.Uint64(m[8:]) }

// AttrID returns the attribute ID (for CM, the message).
func (m MAD) AttrID() uint16 { return binary.BigEndian.Uint16(m[16:]) }

// Data returns the class data after the common header.
func (m MAD) Data() []byte { return m[MADHdrLen:MADLen] }

// PutCMHeader writes the common header of a CM message with attribute id
// and transaction ID tid into m (MADLen bytes), zeroing the rest.
func PutCMHeader(m []byte, attr uint16, tid uint64) {
	clear(m[:MADLen])
	m[0] = 1 // base version
	m[1] = CMClass
	m[2] = CMClassVersion
	m[3] = MethodSend
	binary.BigEndian.PutUint64(m[8:], tid)
	binary.BigEndian.PutUint16(m[16:], attr)
}

// ErrMAD reports a management datagram that is not a CM message of the
// version this package speaks.
var ErrMAD = errors.New("not a CM MAD (class 7, version 2, method Send, 256 bytes)")

// CheckCM checks that m is a CM message.
func CheckCM(m []byte) error {
	if len(m) < MADLen || m[0] != 1 || m[1] != CMClass || m[2] != CMClassVersion || m[3] != MethodSend {
		return ErrMAD
	}
	return nil
}

// Bit fields: width bits starting at bit off from the most significant
// bit of byte at.
func getBits(b []byte, at, off, width int) uint8 {
	return b[at] >> (8 - off - width) & (1<<width - 1)
}

func putBits(b []byte, at, off, width int, v uint8) {
	shift := 8 - off - width
	mask := byte(1<<width-1) << shift
	b[at] = b[at]&^mask | v<<shift&mask
}

func get24(b []byte, at int) uint32 { return binary.BigEndian.Uint32(b[at:]) >> 8 }

func put24(b []byte, at int, v uint32) {
	b[at], b[at+1], b[at+2] = byte(v>>16), byte(v>>8), byte(v)
}

// REQ is a connection request (IBA 12.6.5, Table 106). Offsets are in the
// CM data, after the MAD header.
type REQ struct {
	LocalCommID         uint32
	ServiceID           uint64
	LocalCAGUID         uint64
	LocalQKey           uint32
	LocalQPN            uint32
	ResponderResources  uint8
	InitiatorDepth      uint8
	RemoteCMRespTimeout uint8 // 5 bits: 4.096 µs × 2^t
	TransportType       uint8 // 2 bits: 0 RC, 1 UC
	EndToEndFlowCtl     bool
	StartingPSN         uint32
	LocalCMRespTimeout  uint8
	RetryCount          uint8 // 3 bits
	PKey                uint16
	PathMTU             uint8 // 4 bits: IB MTU enum (1 = 256 ... 5 = 4096)
	RNRRetryCount       uint8 // 3 bits
	MaxCMRetries        uint8 // 4 bits
	SRQ                 bool
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32
	PacketRate          uint8
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8
	SubnetLocal         bool
	LocalAckTimeout     uint8 // 5 bits
	PrivateData         [REQPrivateLen]byte
}

// Private data sizes of the CM messages.
const (
	REQPrivateLen  = 92
	REPPrivateLen  = 196
	RTUPrivateLen  = 224
	REJPrivateLen  = 148
	MRAPrivateLen  = 222
	DREQPrivateLen = 220
	DREPPrivateLen = 224
	SIDRReqPrivLen = 216
	SIDRRepPrivLen = 136
	REJARILen      = 72
)

func bit(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// Marshal writes r into m (MADLen bytes) with transaction ID tid.
func (r *REQ) Marshal(m []byte, tid uint64) {
	PutCMHeader(m, AttrREQ, tid)
	d := m[MADHdrLen:]
	binary.BigEndian.PutUint32(d[0:], r.LocalCommID)
	binary.BigEndian.PutUint64(d[8:], r.ServiceID)
	binary.BigEndian.PutUint64(d[16:], r.LocalCAGUID)
	binary.BigEndian.PutUint32(d[28:], r.LocalQKey)
	put24(d, 32, r.LocalQPN)
	d[35] = r.ResponderResources
	d[39] = r.InitiatorDepth
	putBits(d, 43, 0, 5, r.RemoteCMRespTimeout)
	putBits(d, 43, 5, 2, r.TransportType)
	putBits(d, 43, 7, 1, bit(r.EndToEndFlowCtl))
	put24(d, 44, r.StartingPSN)
	putBits(d, 47, 0, 5, r.LocalCMRespTimeout)
	putBits(d, 47, 5, 3, r.RetryCount)
	binary.BigEndian.PutUint16(d[48:], r.PKey)
	putBits(d, 50, 0, 4, r.PathMTU)
	putBits(d, 50, 5, 3, r.RNRRetryCount)
	putBits(d, 51, 0, 4, r.MaxCMRetries)
	putBits(d, 51, 4, 1, bit(r.SRQ))
	binary.BigEndian.PutUint16(d[52:], r.LocalLID)
	binary.BigEndian.PutUint16(d[54:], r.RemoteLID)
	copy(d[56:72], r.LocalGID[:])
	copy(d[72:88], r.RemoteGID[:])
	binary.BigEndian.PutUint32(d[88:], r.FlowLabel<<12)
	putBits(d, 91, 2, 6, r.PacketRate)
	d[92] = r.TrafficClass
	d[93] = r.HopLimit
	putBits(d, 94, 0, 4, r.SL)
	putBits(d, 94, 4, 1, bit(r.SubnetLocal))
	putBits(d, 95, 0, 5, r.LocalAckTimeout)
	copy(d[140:], r.PrivateData[:])
}

// Unmarshal reads r from the CM message m.
func (r *REQ) Unmarshal(m []byte) {
	d := m[MADHdrLen:MADLen]
	r.LocalCommID = binary.BigEndian.Uint32(d[0:])
	r.ServiceID = binary.BigEndian.Uint64(d[8:])
	r.LocalCAGUID = binary.BigEndian.Uint64(d[16:])
	r.LocalQKey = binary.BigEndian.Uint32(d[28:])
	r.LocalQPN = get24(d, 32)
	r.ResponderResources = d[35]
	r.InitiatorDepth = d[39]
	r.RemoteCMRespTimeout = getBits(d, 43, 0, 5)
	r.TransportType = getBits(d, 43, 5, 2)
	r.EndToEndFlowCtl = getBits(d, 43, 7, 1) != 0
	r.StartingPSN = get24(d, 44)
	r.LocalCMRespTimeout = getBits(d, 47, 0, 5)
	r.RetryCount = getBits(d, 47, 5, 3)
	r.PKey = binary.BigEndian.Uint16(d[48:])
	r.PathMTU = getBits(d, 50, 0, 4)
	r.RNRRetryCount = getBits(d, 50, 5, 3)
	r.MaxCMRetries = getBits(d, 51, 0, 4)
	r.SRQ = getBits(d, 51, 4, 1) != 0
	r.LocalLID = binary.BigEndian.Uint16(d[52:])
	r.RemoteLID = binary.BigEndian.Uint16(d[54:])
	copy(r.LocalGID[:], d[56:72])
	copy(r.RemoteGID[:], d[72:88])
	r.FlowLabel = binary.BigEndian.Uint32(d[88:]) >> 12
	r.PacketRate = getBits(d, 91, 2, 6)
	r.TrafficClass = d[92]
	r.HopLimit = d[93]
	r.SL = getBits(d, 94, 0, 4)
	r.SubnetLocal = getBits(d, 94, 4, 1) != 0
	r.LocalAckTimeout = getBits(d, 95, 0, 5)
	copy(r.PrivateData[:], d[140:])
}

// REP is a connection reply (Table 110).
type REP struct {
	LocalCommID        uint32
	RemoteCommID       uint32
	LocalQKey          uint32
	LocalQPN           uint32
	StartingPSN        uint32
	ResponderResources uint8
	InitiatorDepth     uint8
	TargetAckDelay     uint8 // 5 bits
	FailoverAccepted   uint8 // 2 bits
	EndToEndFlowCtl    bool
	RNRRetryCount      uint8 // 3 bits
	SRQ                bool
	LocalCAGUID        uint64
	PrivateData        [REPPrivateLen]byte
}

// Marshal writes r into m with transaction ID tid.
func (r *REP) Marshal(m []byte, tid uint64) {
	PutCMHeader(m, AttrREP, tid)
	d := m[MADHdrLen:]
	binary.BigEndian.PutUint32(d[0:], r.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], r.RemoteCommID)
	binary.BigEndian.PutUint32(d[8:], r.LocalQKey)
	put24(d, 12, r.LocalQPN)
	put24(d, 20, r.StartingPSN)
	d[24] = r.ResponderResources
	d[25] = r.InitiatorDepth
	putBits(d, 26, 0, 5, r.TargetAckDelay)
	putBits(d, 26, 5, 2, r.FailoverAccepted)
	putBits(d, 26, 7, 1, bit(r.EndToEndFlowCtl))
	putBits(d, 27, 0, 3, r.RNRRetryCount)
	putBits(d, 27, 3, 1, bit(r.SRQ))
	binary.BigEndian.PutUint64(d[28:], r.LocalCAGUID)
	copy(d[36:], r.PrivateData[:])
}

// Unmarshal reads r from m.
func (r *REP) Unmarshal(m []byte) {
	d := m[MADHdrLen:MADLen]
	r.LocalCommID = binary.BigEndian.Uint32(d[0:])
	r.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	r.LocalQKey = binary.BigEndian.Uint32(d[8:])
	r.LocalQPN = get24(d, 12)
	r.StartingPSN = get24(d, 20)
	r.ResponderResources = d[24]
	r.InitiatorDepth = d[25]
	r.TargetAckDelay = getBits(d, 26, 0, 5)
	r.FailoverAccepted = getBits(d, 26, 5, 2)
	r.EndToEndFlowCtl = getBits(d, 26, 7, 1) != 0
	r.RNRRetryCount = getBits(d, 27, 0, 3)
	r.SRQ = getBits(d, 27, 3, 1) != 0
	r.LocalCAGUID = binary.BigEndian.Uint64(d[28:])
	copy(r.PrivateData[:], d[36:])
}

// CommIDs reads the local and remote communication IDs that begin every
// CM message but REQ and the SIDR ones.
func CommIDs(m []byte) (local, remote uint32) {
	d := m[MADHdrLen:]
	return binary.BigEndian.Uint32(d[0:]), binary.BigEndian.Uint32(d[4:])
}

// PutCommIDs writes them.
func PutCommIDs(m []byte, local, remote uint32) {
	d := m[MADHdrLen:]
	binary.BigEndian.PutUint32(d[0:], local)
	binary.BigEndian.PutUint32(d[4:], remote)
}

// Private returns the private data of a CM message of attribute attr, in
// m (nil for an unknown attribute).
func Private(m []byte, attr uint16) []byte {
	d := m[MADHdrLen:MADLen]
	switch attr {
	case AttrREQ:
		return d[140 : 140+REQPrivateLen]
	case AttrREP:
		return d[36 : 36+REPPrivateLen]
	case AttrRTU, AttrDREP:
		return d[8 : 8+RTUPrivateLen]
	case AttrREJ:
		return d[84 : 84+REJPrivateLen]
	case AttrMRA:
		return d[10 : 10+MRAPrivateLen]
	case AttrDREQ:
		return d[12 : 12+DREQPrivateLen]
	case AttrSIDRReq:
		return d[16 : 16+SIDRReqPrivLen]
	case AttrSIDRRep:
		return d[96 : 96+SIDRRepPrivLen]
	}
	return nil
}

// REJ reasons (IBA 12.6.7.2, Table 109) that goverbs gives or reads.
const (
	RejNoQP           = 1
	RejNoResources    = 3
	RejTimeout        = 4 // the peer did not answer (ARI: its CA GUID)
	RejUnsupported    = 5
	RejInvalidCommID  = 6
	RejInvalidSID     = 8 // nobody listens on the service ID
	RejInvalidTT      = 9
	RejStaleConn      = 10
	RejInvalidMTU     = 26
	RejInsuffRespRes  = 27
	RejConsumer       = 28 // the application rejected
	RejInvalidRNRRtry = 29
	RejDupCommID      = 30

	RejMsgREQ   = 0
	RejMsgREP   = 1
	RejMsgOther = 2
)

// PutREJ writes a REJ of message kind msg (RejMsgREQ, ...) with reason,
// private data and transaction ID tid into m.
func PutREJ(m []byte, tid uint64, local, remote uint32, msg uint8, reason uint16, private []byte) {
	PutCMHeader(m, AttrREJ, tid)
	PutCommIDs(m, local, remote)
	d := m[MADHdrLen:]
	putBits(d, 8, 0, 2, msg)
	binary.BigEndian.PutUint16(d[10:], reason)
	copy(d[84:84+REJPrivateLen], private)
}

// PutREJInfo writes a REJ's additional rejection information (at most
// REJARILen bytes: for RejTimeout, the rejecting CA's GUID) and its length.
func PutREJInfo(m []byte, ari []byte) {
	d := m[MADHdrLen:]
	n := copy(d[12:12+REJARILen], ari)
	putBits(d, 9, 0, 7, uint8(n))
}

// REJInfo reads a REJ's additional rejection information.
func REJInfo(m []byte) []byte {
	d := m[MADHdrLen:]
	return d[12 : 12+min(int(getBits(d, 9, 0, 7)), REJARILen)]
}

// REJReason reads a REJ's rejected message kind and reason.
func REJReason(m []byte) (msg uint8, reason uint16) {
	d := m[MADHdrLen:]
	return getBits(d, 8, 0, 2), binary.BigEndian.Uint16(d[10:])
}

// PutMRA writes an MRA of message kind msg (0 REQ, 1 REP, 2 LAP) asking for
// service timeout t (4.096 µs × 2^t) into m.
func PutMRA(m []byte, tid uint64, local, remote uint32, msg, t uint8) {
	PutCMHeader(m, AttrMRA, tid)
	PutCommIDs(m, local, remote)
	d := m[MADHdrLen:]
	putBits(d, 8, 0, 2, msg)
	putBits(d, 9, 0, 5, t)
}

// MRATimeout reads an MRA's message kind and service timeout.
func MRATimeout(m []byte) (msg, t uint8) {
	d := m[MADHdrLen:]
	return getBits(d, 8, 0, 2), getBits(d, 9, 0, 5)
}

// PutDREQ writes a DREQ for the peer's QP remoteQPN.
func PutDREQ(m []byte, tid uint64, local, remote, remoteQPN uint32, private []byte) {
	PutCMHeader(m, AttrDREQ, tid)
	PutCommIDs(m, local, remote)
	put24(m[MADHdrLen:], 8, remoteQPN)
	copy(Private(m, AttrDREQ), private)
}

// DREQQPN reads a DREQ's remote QPN.
func DREQQPN(m []byte) uint32 { return get24(m[MADHdrLen:], 8) }

// SIDRReq is a service ID resolution request (Table 119).
type SIDRReq struct {
	RequestID uint32
	PKey      uint16
	ServiceID uint64
}

// Marshal writes r into m with private data.
func (r *SIDRReq) Marshal(m []byte, tid uint64, private []byte) {
	PutCMHeader(m, AttrSIDRReq, tid)
	d := m[MADHdrLen:]
	binary.BigEndian.PutUint32(d[0:], r.RequestID)
	binary.BigEndian.PutUint16(d[4:], r.PKey)
	binary.BigEndian.PutUint64(d[8:], r.ServiceID)
	copy(Private(m, AttrSIDRReq), private)
}

// Unmarshal reads r from m.
func (r *SIDRReq) Unmarshal(m []byte) {
	d := m[MADHdrLen:]
	r.RequestID = binary.BigEndian.Uint32(d[0:])
	r.PKey = binary.BigEndian.Uint16(d[4:])
	r.ServiceID = binary.BigEndian.Uint64(d[8:])
}

// SIDRRep is a service ID resolution reply (Table 120).
type SIDRRep struct {
	RequestID uint32
	Status    uint8 // 0 QP valid, 1 SID not supported, 2 rejected, 3 no QP, 4 redirect
	QPN       uint32
	ServiceID uint64
	QKey      uint32
}

// Marshal writes r into m with private data.
func (r *SIDRRep) Marshal(m []byte, tid uint64, private []byte) {
	PutCMHeader(m, AttrSIDRRep, tid)
	d := m[MADHdrLen:]
	binary.BigEndian.PutUint32(d[0:], r.RequestID)
	d[4] = r.Status
	put24(d, 8, r.QPN)
	binary.BigEndian.PutUint64(d[12:], r.ServiceID)
	binary.BigEndian.PutUint32(d[20:], r.QKey)
	copy(Private(m, AttrSIDRRep), private)
}

// Unmarshal reads r from m.
func (r *SIDRRep) Unmarshal(m []byte) {
	d := m[MADHdrLen:]
	r.RequestID = binary.BigEndian.Uint32(d[0:])
	r.Status = d[4]
	r.QPN = get24(d, 8)
	r.ServiceID = binary.BigEndian.Uint64(d[12:])
	r.QKey = binary.BigEndian.Uint32(d[20:])
}

// rdma_cm's port spaces and its header (drivers/infiniband/core/cma.c): a
// service ID is 0x0000000001 PS(16) PORT(16)... precisely the port space
// shifted left 16, with the port in the low 16 bits.
const (
	PortSpaceTCP = 0x0106
	PortSpaceUDP = 0x0111
	PortSpaceIB  = 0x013F

	CMAHdrLen = 36
)

// ServiceID returns rdma_cm's service ID of port in port space ps.
func ServiceID(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// ServicePort returns the port space and port of an rdma_cm service ID, and
// whether it is one.
func ServicePort(sid uint64) (ps, port uint16, ok bool) {
	ps, port = uint16(sid>>16), uint16(sid)
	return ps, port, sid>>32 == 0 && (ps == PortSpaceTCP || ps == PortSpaceUDP || ps == PortSpaceIB)
}

// PutCMAHdr writes rdma_cm's 36-byte header that begins the private data
// of a REQ and a SIDR REQ: version 0, the IP version, the source port, and
// the source and destination addresses.
func PutCMAHdr(b []byte, src, dst netip.Addr, srcPort uint16) {
	clear(b[:CMAHdrLen])
	b[0] = 0
	if src.Is4() {
		b[1] = 4 << 4
		s, d := src.As4(), dst.Unmap().As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := src.As16(), dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	binary.BigEndian.PutUint16(b[2:], srcPort)
}

// CMAHdr reads rdma_cm's header; ok is false when b does not hold one.
func CMAHdr(b []byte) (src, dst netip.Addr, srcPort uint16, ok bool) {
	if len(b) < CMAHdrLen || b[0] != 0 {
		return src, dst, 0, false
	}
	srcPort = binary.BigEndian.Uint16(b[2:])
	switch b[1] >> 4 {
	case 4:
		return netip.AddrFrom4([4]byte(b[16:20])), netip.AddrFrom4([4]byte(b[32:36])), srcPort, true
	case 6:
		return netip.AddrFrom16([16]byte(b[4:20])), netip.AddrFrom16([16]byte(b[20:36])), srcPort, true
	}
	return src, dst, 0, false
}

// GIDOf returns the RoCEv2 GID of an IP address (IPv4 mapped into IPv6).
func GIDOf(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

// AddrOfGID returns the IP address of a RoCEv2 GID.
func AddrOfGID(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }
