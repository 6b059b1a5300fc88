package verbs

import (
	"fmt"
	"net/netip"

	"github.com/goverbs/goverbs/internal/defaults"
)

// SGE is one scatter/gather element: Length bytes at Addr inside the memory
// region whose local key is LKey. Addr is an address in the region's address
// space (MR.Addr() is its first byte), exactly as in struct ibv_sge; the
// provider resolves it through its region table and checks it, so a wrong key
// or an address outside the region fails the work request (LOC_PROT_ERR)
// instead of touching memory. MR.SGE builds one from an offset.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (struct ibv_send_wr). Which fields matter
// depends on Opcode:
//   - SEND, SEND_WITH_IMM, SEND_WITH_INV: SGList (the message), ImmData or
//     InvalidateRKey; on UD also AH, RemoteQPN and RemoteQKey.
//   - RDMA_WRITE(_WITH_IMM), RDMA_READ: RemoteAddr and RKey name the remote
//     memory; SGList is the local source (write) or sink (read).
//   - ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD: RemoteAddr (8-byte aligned) and
//     RKey, CompareAdd and Swap; SGList is one 8-byte local sink for the
//     original value.
//   - ATOMIC_WRITE: RemoteAddr (8-byte aligned) and RKey name the target,
//     which needs remote write access; SGList (or Inline) holds exactly the 8
//     bytes to write, which the target stores with one atomic store.
//   - FLUSH: RemoteAddr, RKey and FlushLen name the remote range, FlushType
//     what to guarantee; SGList is empty. The target region needs
//     AccessFlushGlobal or AccessFlushPersistent for that type.
//   - BIND_MW: BindMW names a type 2 window and what to bind it to (type 1
//     windows are bound with QP.BindMW); no SGList.
//   - LOCAL_INV: InvalidateRKey is the key of a type 2 window (or of a
//     region) of the QP's PD that stops working; no SGList.
type SendWR struct {
	WRID   uint64
	SGList []SGE
	Opcode WROpcode
	Flags  SendFlags
	// ImmData is the immediate value of *_WITH_IMM operations. goverbs carries
	// it as a plain number end to end (libibverbs keeps it big-endian in
	// imm_data); the receiver's WC.ImmData holds the same value.
	ImmData uint32
	// InvalidateRKey is the remote key a SEND_WITH_INV invalidates at the
	// receiver, or LOCAL_INV here.
	InvalidateRKey uint32
	RemoteAddr     uint64
	RKey           uint32
	// CompareAdd is the compare value of compare-and-swap, or the addend of fetch-and-add.
	CompareAdd uint64
	// Swap is the value compare-and-swap stores when the compare matches.
	Swap uint64
	// FlushType is what a FLUSH guarantees when it completes (ibv_wr_flush's type).
	FlushType FlushType
	// FlushLen is the length of the range a FLUSH covers, from RemoteAddr.
	FlushLen uint32
	// AH, RemoteQPN and RemoteQKey address the destination of a UD send.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// BindMW is what a BIND_MW request binds; it is read when the request
	// is posted.
	BindMW *BindMW
	// Inline, with SendInline set, is the message itself: it is copied at post
	// time and need not be registered memory (the Go counterpart of passing
	// an unregistered pointer with IBV_SEND_INLINE). When Inline is nil an
	// inline request copies the bytes named by SGList instead.
	Inline []byte
}

// FlushType is the type of a FLUSH work request (IBV_FLUSH_GLOBAL,
// IBV_FLUSH_PERSISTENT).
type FlushType uint8

const (
	// FlushGlobal: when the FLUSH completes, the data written before it to
	// the range is visible to the target's CPU (global visibility).
	FlushGlobal FlushType = 1
	// FlushPersistent: when the FLUSH completes, the data written before it
	// to the range is durable at the target: on a region backed by a file,
	// written back to the file (msync) on the target host.
	FlushPersistent FlushType = 2
)

// String names the flush type, e.g. "PERSISTENT".
func (t FlushType) String() string {
	switch t {
	case FlushGlobal:
		return "GLOBAL"
	case FlushPersistent:
		return "PERSISTENT"
	}
	return fmt.Sprintf("FlushType(%d)", uint8(t))
}

// RecvWR is a receive work request (struct ibv_recv_wr): the buffers one
// incoming message is scattered into, and the wr_id its completion carries.
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// WC is a work completion (struct ibv_wc). Only WRID, Status, Opcode (for
// successful completions), QPNum and VendorErr are defined when Status is not
// WCSuccess.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	// ByteLen is the number of bytes transferred; on a UD receive it includes
	// the 40-byte GRH area.
	ByteLen uint32
	// ImmData is the immediate value when Flags has WCFlagWithImm, or the
	// invalidated remote key when Flags has WCFlagWithInv.
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	Flags        WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// GID is a 128-bit global identifier (an IPv6 address, or an IPv4-mapped one on RoCE/iWARP).
type GID [16]byte

// String prints the GID as libibverbs tools do, as an IPv6 address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// DeviceAttr describes a device (struct ibv_device_attr), with the limits a
// provider enforces.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	DeviceCapFlags  uint32
	MaxSGE          int
	MaxSGERd        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // max outstanding RDMA Read/atomic per QP as target (IRD)
	MaxQPInitRdAtom int // max outstanding RDMA Read/atomic per QP as initiator (ORD)
	MaxResRdAtom    int
	AtomicCap       AtomicCap
	MaxAH           int
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxInlineData   int // not in ibv_device_attr; the largest max_inline_data a QP may ask for
	MaxPKeys        int
	PhysPortCnt     uint8
	NodeType        NodeType
	TransportType   TransportType
	// DeviceCapFlagsEx is device_cap_flags_ex of struct ibv_device_attr_ex
	// (ibv_query_device_ex): the bits of DeviceCapFlags and the wider ones,
	// of which goverbs names those applications test (DeviceFlushGlobal,
	// ...). A provider sets a bit only for what it can do itself.
	DeviceCapFlagsEx DeviceCapFlagsEx
}

// DeviceCapFlagsEx are the capability bits of ibv_device_attr_ex's
// device_cap_flags_ex (IB_UVERBS_DEVICE_*).
type DeviceCapFlagsEx uint64

// The capabilities of IBA 1.5's FLUSH and ATOMIC_WRITE, with the kernel's
// values. A device without them refuses the opcodes and the access flags
// (AccessFlushGlobal, AccessFlushPersistent) with ErrNotSupported, as
// rdma-core's providers do before version 45 and most NICs do still.
const (
	// DeviceFlushGlobal is IB_UVERBS_DEVICE_FLUSH_GLOBAL: FLUSH of type
	// FlushGlobal and regions with AccessFlushGlobal.
	DeviceFlushGlobal DeviceCapFlagsEx = 1 << 38
	// DeviceFlushPersistent is IB_UVERBS_DEVICE_FLUSH_PERSISTENT: FLUSH of
	// type FlushPersistent and regions with AccessFlushPersistent.
	DeviceFlushPersistent DeviceCapFlagsEx = 1 << 39
	// DeviceAtomicWrite is IB_UVERBS_DEVICE_ATOMIC_WRITE: WRAtomicWrite.
	DeviceAtomicWrite DeviceCapFlagsEx = 1 << 40
)

// PortAttr describes a port (struct ibv_port_attr).
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTblLen    int
	PortCapFlags uint32
	MaxMsgSz     uint32
	PKeyTblLen   uint16
	LID          uint16
	SMLID        uint16
	LMC          uint8
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    uint8
	LinkLayer    LinkLayer
}

// QPCap holds the sizes of a QP's work queues (struct ibv_qp_cap). On
// creation the provider may round them up; the QP's Query reports the
// actual values.
//
// A zero field means a useful default, so that QPCap{} makes a QP that
// can post: 16 work requests each way (max_send_wr, max_recv_wr), 1
// scatter/gather element each way (max_send_sge, max_recv_sge), and no
// inline data (max_inline_data). A negative field asks for none: a QP
// that only receives can say MaxSendWR: -1. The receive fields of a QP
// with an SRQ are not used.
type QPCap struct {
	MaxSendWR     int // max_send_wr; 0 means 16
	MaxRecvWR     int // max_recv_wr; 0 means 16
	MaxSendSGE    int // max_send_sge; 0 means 1
	MaxRecvSGE    int // max_recv_sge; 0 means 1
	MaxInlineData int // max_inline_data; 0 means none
}

// withDefaults gives each zero field its default and each negative one 0.
func (c QPCap) withDefaults(srq bool) QPCap {
	d := QPCap{
		MaxSendWR:     defaults.Int(c.MaxSendWR, defaults.QPWR),
		MaxRecvWR:     defaults.Int(c.MaxRecvWR, defaults.QPWR),
		MaxSendSGE:    defaults.Int(c.MaxSendSGE, defaults.QPSGE),
		MaxRecvSGE:    defaults.Int(c.MaxRecvSGE, defaults.QPSGE),
		MaxInlineData: defaults.Int(c.MaxInlineData, defaults.QPInline),
	}
	if srq {
		d.MaxRecvWR, d.MaxRecvSGE = max(c.MaxRecvWR, 0), max(c.MaxRecvSGE, 0)
	}
	return d
}

// QPInitAttr is what CreateQP needs (struct ibv_qp_init_attr). Its zero
// value but the CQs is a useful RC QP: QPType 0 means QPTRC, and a zero
// Cap the defaults QPCap describes.
type QPInitAttr struct {
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, when set, makes the QP take its receive buffers from the shared
	// receive queue; its own receive queue is not used and PostRecv on it fails.
	SRQ      *SRQ
	Cap      QPCap
	QPType   QPType // qp_type; 0 means QPTRC
	SQSigAll bool   // sq_sig_all: every send WR generates a completion, signaled or not
	// UserData is an opaque value the application can read back with QP.UserData.
	UserData any
}

// GlobalRoute is the GRH part of an address vector (struct ibv_global_route).
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (struct ibv_ah_attr).
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
}

// QPAttr holds the attributes Modify sets and Query reports (struct ibv_qp_attr).
// Which fields Modify reads is chosen by a QPAttrMask.
type QPAttr struct {
	QPState          QPState
	CurQPState       QPState
	PathMTU          MTU
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    AccessFlags
	Cap              QPCap
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8 // ORD: outstanding RDMA Read/atomic this QP may initiate
	MaxDestRdAtomic  uint8 // IRD: outstanding RDMA Read/atomic this QP accepts as target
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8 // 7 means retry forever
	AltPortNum       uint8
	AltTimeout       uint8
}

// SRQInitAttr is what CreateSRQ needs (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	Attr     SRQAttr
	UserData any
}

// SRQAttr holds the attributes of a shared receive queue (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	// SRQLimit arms the limit event: when fewer than SRQLimit receives remain
	// posted, EventSRQLimitReached is raised once and the limit disarms (0 = disarmed).
	SRQLimit int
}

// SRQAttrMask selects the SRQAttr fields SRQ.Modify applies.
type SRQAttrMask uint32

// SRQAttrMask values (enum ibv_srq_attr_mask).
const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // resize (not supported by the software engine)
	SRQAttrLimit SRQAttrMask = 1 << 1 // arm the limit event
)

// AsyncEvent is an asynchronous event (struct ibv_async_event). Exactly one
// of QP, CQ and SRQ is set, or PortNum for port events, or none for device events.
type AsyncEvent struct {
	Type    EventType
	QP      *QP
	CQ      *CQ
	SRQ     *SRQ
	PortNum uint8
}

func (e AsyncEvent) String() string {
	switch {
	case e.QP != nil:
		return fmt.Sprintf("%v (QP %#x)", e.Type, e.QP.Num())
	case e.CQ != nil:
		return fmt.Sprintf("%v (CQ)", e.Type)
	case e.SRQ != nil:
		return fmt.Sprintf("%v (SRQ)", e.Type)
	case e.PortNum != 0:
		return fmt.Sprintf("%v (port %d)", e.Type, e.PortNum)
	}
	return e.Type.String()
}

// OpCount counts completed operations and their bytes.
type OpCount struct {
	Msgs, Bytes uint64
}

// QPCounters is what a QP did since it was created, as a NIC's per-QP
// counters (rdma statistic): every request counts, signaled or not.
type QPCounters struct {
	// Sent counts the send requests that completed successfully, by
	// opcode (WROpcode), with their message lengths.
	Sent [16]OpCount
	// Received counts the receives that completed successfully (SEND and
	// RDMA WRITE with immediate), with the bytes placed.
	Received OpCount
	// SendErrors and RecvErrors count the completions with an error
	// status, by WCStatus (index Status&31), WR_FLUSH_ERR included.
	SendErrors, RecvErrors [32]uint64
	// Retransmits counts packets sent again (go-back-N after a lost packet
	// or a sequence NAK) and RNRNaks the RNR NAKs received, on transports
	// that have them (RoCE); 0 elsewhere.
	Retransmits, RNRNaks uint64
}

// Add adds o's counts to c.
func (c *QPCounters) Add(o *QPCounters) {
	for i := range c.Sent {
		c.Sent[i].Msgs += o.Sent[i].Msgs
		c.Sent[i].Bytes += o.Sent[i].Bytes
	}
	c.Received.Msgs += o.Received.Msgs
	c.Received.Bytes += o.Received.Bytes
	for i := range c.SendErrors {
		c.SendErrors[i] += o.SendErrors[i]
		c.RecvErrors[i] += o.RecvErrors[i]
	}
	c.Retransmits += o.Retransmits
	c.RNRNaks += o.RNRNaks
}

// DeviceCounters is the sum of the counters of every QP the device had in
// this process (destroyed ones included), and the device's own.
type DeviceCounters struct {
	QPCounters
	QPs         uint64 // QPs created
	CQOverflows uint64 // CQs that overflowed
}
