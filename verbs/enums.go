package verbs

import (
	"strconv"
	"strings"
)

// This file defines the enumerations and bit-flag sets of libibverbs
// (infiniband/verbs.h). Every numeric value equals its C counterpart so that
// values can be exchanged with the kernel and with C code unchanged.

// enumString returns names[v] if v is in range and has a name, and
// "typ(v)" otherwise.
func enumString(names []string, v int64, typ string) string {
	if v >= 0 && v < int64(len(names)) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.FormatInt(v, 10) + ")"
}

// flagsString joins the names of the bits set in v with "|". Bits without a
// name are appended as one hexadecimal value. A zero v prints as "0".
func flagsString(v uint32, names *[32]string) string {
	if v == 0 {
		return "0"
	}
	var b strings.Builder
	var unknown uint32
	for i := range 32 {
		bit := uint32(1) << i
		if v&bit == 0 {
			continue
		}
		if names[i] == "" {
			unknown |= bit
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(names[i])
	}
	if unknown != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(unknown), 16))
	}
	return b.String()
}

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint32

const (
	// WCSuccess is IBV_WC_SUCCESS.
	WCSuccess WCStatus = 0
	// WCLocLenErr is IBV_WC_LOC_LEN_ERR.
	WCLocLenErr WCStatus = 1
	// WCLocQPOpErr is IBV_WC_LOC_QP_OP_ERR.
	WCLocQPOpErr WCStatus = 2
	// WCLocEECOpErr is IBV_WC_LOC_EEC_OP_ERR.
	WCLocEECOpErr WCStatus = 3
	// WCLocProtErr is IBV_WC_LOC_PROT_ERR.
	WCLocProtErr WCStatus = 4
	// WCWRFlushErr is IBV_WC_WR_FLUSH_ERR.
	WCWRFlushErr WCStatus = 5
	// WCMWBindErr is IBV_WC_MW_BIND_ERR.
	WCMWBindErr WCStatus = 6
	// WCBadRespErr is IBV_WC_BAD_RESP_ERR.
	WCBadRespErr WCStatus = 7
	// WCLocAccessErr is IBV_WC_LOC_ACCESS_ERR.
	WCLocAccessErr WCStatus = 8
	// WCRemInvReqErr is IBV_WC_REM_INV_REQ_ERR.
	WCRemInvReqErr WCStatus = 9
	// WCRemAccessErr is IBV_WC_REM_ACCESS_ERR.
	WCRemAccessErr WCStatus = 10
	// WCRemOpErr is IBV_WC_REM_OP_ERR.
	WCRemOpErr WCStatus = 11
	// WCRetryExcErr is IBV_WC_RETRY_EXC_ERR.
	WCRetryExcErr WCStatus = 12
	// WCRNRRetryExcErr is IBV_WC_RNR_RETRY_EXC_ERR.
	WCRNRRetryExcErr WCStatus = 13
	// WCLocRDDViolErr is IBV_WC_LOC_RDD_VIOL_ERR.
	WCLocRDDViolErr WCStatus = 14
	// WCRemInvRDReqErr is IBV_WC_REM_INV_RD_REQ_ERR.
	WCRemInvRDReqErr WCStatus = 15
	// WCRemAbortErr is IBV_WC_REM_ABORT_ERR.
	WCRemAbortErr WCStatus = 16
	// WCInvEECNErr is IBV_WC_INV_EECN_ERR.
	WCInvEECNErr WCStatus = 17
	// WCInvEECStateErr is IBV_WC_INV_EEC_STATE_ERR.
	WCInvEECStateErr WCStatus = 18
	// WCFatalErr is IBV_WC_FATAL_ERR.
	WCFatalErr WCStatus = 19
	// WCRespTimeoutErr is IBV_WC_RESP_TIMEOUT_ERR.
	WCRespTimeoutErr WCStatus = 20
	// WCGeneralErr is IBV_WC_GENERAL_ERR.
	WCGeneralErr WCStatus = 21
	// WCTMErr is IBV_WC_TM_ERR.
	WCTMErr WCStatus = 22
	// WCTMRndvIncomplete is IBV_WC_TM_RNDV_INCOMPLETE.
	WCTMRndvIncomplete WCStatus = 23
)

var wcStatusText = [...]string{
	WCSuccess:          "success",
	WCLocLenErr:        "local length error",
	WCLocQPOpErr:       "local QP operation error",
	WCLocEECOpErr:      "local EE context operation error",
	WCLocProtErr:       "local protection error",
	WCWRFlushErr:       "Work Request Flushed Error",
	WCMWBindErr:        "memory management operation error",
	WCBadRespErr:       "bad response error",
	WCLocAccessErr:     "local access error",
	WCRemInvReqErr:     "remote invalid request error",
	WCRemAccessErr:     "remote access error",
	WCRemOpErr:         "remote operation error",
	WCRetryExcErr:      "transport retry counter exceeded",
	WCRNRRetryExcErr:   "RNR retry counter exceeded",
	WCLocRDDViolErr:    "local RDD violation error",
	WCRemInvRDReqErr:   "remote invalid RD request",
	WCRemAbortErr:      "aborted error",
	WCInvEECNErr:       "invalid EE context number",
	WCInvEECStateErr:   "invalid EE context state",
	WCFatalErr:         "fatal error",
	WCRespTimeoutErr:   "response timeout error",
	WCGeneralErr:       "general error",
	WCTMErr:            "TM error",
	WCTMRndvIncomplete: "TM software rendezvous",
}

var wcStatusName = [...]string{
	WCSuccess:          "IBV_WC_SUCCESS",
	WCLocLenErr:        "IBV_WC_LOC_LEN_ERR",
	WCLocQPOpErr:       "IBV_WC_LOC_QP_OP_ERR",
	WCLocEECOpErr:      "IBV_WC_LOC_EEC_OP_ERR",
	WCLocProtErr:       "IBV_WC_LOC_PROT_ERR",
	WCWRFlushErr:       "IBV_WC_WR_FLUSH_ERR",
	WCMWBindErr:        "IBV_WC_MW_BIND_ERR",
	WCBadRespErr:       "IBV_WC_BAD_RESP_ERR",
	WCLocAccessErr:     "IBV_WC_LOC_ACCESS_ERR",
	WCRemInvReqErr:     "IBV_WC_REM_INV_REQ_ERR",
	WCRemAccessErr:     "IBV_WC_REM_ACCESS_ERR",
	WCRemOpErr:         "IBV_WC_REM_OP_ERR",
	WCRetryExcErr:      "IBV_WC_RETRY_EXC_ERR",
	WCRNRRetryExcErr:   "IBV_WC_RNR_RETRY_EXC_ERR",
	WCLocRDDViolErr:    "IBV_WC_LOC_RDD_VIOL_ERR",
	WCRemInvRDReqErr:   "IBV_WC_REM_INV_RD_REQ_ERR",
	WCRemAbortErr:      "IBV_WC_REM_ABORT_ERR",
	WCInvEECNErr:       "IBV_WC_INV_EECN_ERR",
	WCInvEECStateErr:   "IBV_WC_INV_EEC_STATE_ERR",
	WCFatalErr:         "IBV_WC_FATAL_ERR",
	WCRespTimeoutErr:   "IBV_WC_RESP_TIMEOUT_ERR",
	WCGeneralErr:       "IBV_WC_GENERAL_ERR",
	WCTMErr:            "IBV_WC_TM_ERR",
	WCTMRndvIncomplete: "IBV_WC_TM_RNDV_INCOMPLETE",
}

// String returns the same text as ibv_wc_status_str, or "WCStatus(n)" for
// an unknown status.
func (s WCStatus) String() string {
	return enumString(wcStatusText[:], int64(s), "WCStatus")
}

// Name returns the C constant name, e.g. "IBV_WC_WR_FLUSH_ERR", or
// "WCStatus(n)" for an unknown status.
func (s WCStatus) Name() string {
	return enumString(wcStatusName[:], int64(s), "WCStatus")
}

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode).
// Receive completions have the WCRecv bit (128) set.
type WCOpcode uint32

const (
	// WCSend is IBV_WC_SEND.
	WCSend WCOpcode = 0
	// WCRDMAWrite is IBV_WC_RDMA_WRITE.
	WCRDMAWrite WCOpcode = 1
	// WCRDMARead is IBV_WC_RDMA_READ.
	WCRDMARead WCOpcode = 2
	// WCCompSwap is IBV_WC_COMP_SWAP.
	WCCompSwap WCOpcode = 3
	// WCFetchAdd is IBV_WC_FETCH_ADD.
	WCFetchAdd WCOpcode = 4
	// WCBindMW is IBV_WC_BIND_MW.
	WCBindMW WCOpcode = 5
	// WCLocalInv is IBV_WC_LOCAL_INV.
	WCLocalInv WCOpcode = 6
	// WCTSO is IBV_WC_TSO.
	WCTSO WCOpcode = 7
	// WCFlush is IBV_WC_FLUSH.
	WCFlush WCOpcode = 8
	// WCAtomicWrite is IBV_WC_ATOMIC_WRITE.
	WCAtomicWrite WCOpcode = 9
	// WCRecv is IBV_WC_RECV (1 << 7).
	WCRecv WCOpcode = 128
	// WCRecvRDMAWithImm is IBV_WC_RECV_RDMA_WITH_IMM.
	WCRecvRDMAWithImm WCOpcode = 129
)

var wcOpcodeSendNames = [...]string{
	WCSend:        "SEND",
	WCRDMAWrite:   "RDMA_WRITE",
	WCRDMARead:    "RDMA_READ",
	WCCompSwap:    "COMP_SWAP",
	WCFetchAdd:    "FETCH_ADD",
	WCBindMW:      "BIND_MW",
	WCLocalInv:    "LOCAL_INV",
	WCTSO:         "TSO",
	WCFlush:       "FLUSH",
	WCAtomicWrite: "ATOMIC_WRITE",
}

var wcOpcodeRecvNames = [...]string{
	0:                          "RECV",
	WCRecvRDMAWithImm - WCRecv: "RECV_RDMA_WITH_IMM",
}

// String returns the constant name without the IBV_WC_ prefix, e.g.
// "RDMA_WRITE", or "WCOpcode(n)" for an unknown opcode.
func (o WCOpcode) String() string {
	if o >= WCRecv && int(o-WCRecv) < len(wcOpcodeRecvNames) {
		return wcOpcodeRecvNames[o-WCRecv]
	}
	return enumString(wcOpcodeSendNames[:], int64(o), "WCOpcode")
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint32

const (
	// WRRDMAWrite is IBV_WR_RDMA_WRITE.
	WRRDMAWrite WROpcode = 0
	// WRRDMAWriteWithImm is IBV_WR_RDMA_WRITE_WITH_IMM.
	WRRDMAWriteWithImm WROpcode = 1
	// WRSend is IBV_WR_SEND.
	WRSend WROpcode = 2
	// WRSendWithImm is IBV_WR_SEND_WITH_IMM.
	WRSendWithImm WROpcode = 3
	// WRRDMARead is IBV_WR_RDMA_READ.
	WRRDMARead WROpcode = 4
	// WRAtomicCmpAndSwp is IBV_WR_ATOMIC_CMP_AND_SWP.
	WRAtomicCmpAndSwp WROpcode = 5
	// WRAtomicFetchAndAdd is IBV_WR_ATOMIC_FETCH_AND_ADD.
	WRAtomicFetchAndAdd WROpcode = 6
	// WRLocalInv is IBV_WR_LOCAL_INV.
	WRLocalInv WROpcode = 7
	// WRBindMW is IBV_WR_BIND_MW.
	WRBindMW WROpcode = 8
	// WRSendWithInv is IBV_WR_SEND_WITH_INV.
	WRSendWithInv WROpcode = 9
	// WRFlush is IBV_WR_FLUSH: make the remote range visible to the target's
	// CPU, or persistent, before the request completes (see SendWR).
	WRFlush WROpcode = 14
	// WRAtomicWrite is IBV_WR_ATOMIC_WRITE: an 8-byte write that the target
	// applies as one atomic store (see SendWR).
	WRAtomicWrite WROpcode = 15
)

var wrOpcodeNames = [...]string{
	WRRDMAWrite:         "RDMA_WRITE",
	WRRDMAWriteWithImm:  "RDMA_WRITE_WITH_IMM",
	WRSend:              "SEND",
	WRSendWithImm:       "SEND_WITH_IMM",
	WRRDMARead:          "RDMA_READ",
	WRAtomicCmpAndSwp:   "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAndAdd: "ATOMIC_FETCH_AND_ADD",
	WRLocalInv:          "LOCAL_INV",
	WRBindMW:            "BIND_MW",
	WRSendWithInv:       "SEND_WITH_INV",
	WRFlush:             "FLUSH",
	WRAtomicWrite:       "ATOMIC_WRITE",
}

// wrToWC maps each WROpcode to the opcode of the requester's completion.
var wrToWC = [...]WCOpcode{
	WRRDMAWrite:         WCRDMAWrite,
	WRRDMAWriteWithImm:  WCRDMAWrite,
	WRSend:              WCSend,
	WRSendWithImm:       WCSend,
	WRRDMARead:          WCRDMARead,
	WRAtomicCmpAndSwp:   WCCompSwap,
	WRAtomicFetchAndAdd: WCFetchAdd,
	WRLocalInv:          WCLocalInv,
	WRBindMW:            WCBindMW,
	WRSendWithInv:       WCSend,
	10:                  WCOpcode(^uint32(0)),
	11:                  WCOpcode(^uint32(0)),
	12:                  WCOpcode(^uint32(0)),
	13:                  WCOpcode(^uint32(0)),
	WRFlush:             WCFlush,
	WRAtomicWrite:       WCAtomicWrite,
}

// String returns the constant name without the IBV_WR_ prefix, e.g.
// "SEND_WITH_IMM", or "WROpcode(n)" for an unknown opcode.
func (o WROpcode) String() string {
	return enumString(wrOpcodeNames[:], int64(o), "WROpcode")
}

// WCOpcode returns the opcode of the completion the requester sees for a
// work request with opcode o (e.g. WRSendWithImm gives WCSend). For an
// unknown o it returns WCOpcode(0xffffffff), which matches no constant.
func (o WROpcode) WCOpcode() WCOpcode {
	if int64(o) < int64(len(wrToWC)) {
		return wrToWC[o]
	}
	return WCOpcode(^uint32(0))
}

// SendFlags is a set of send work request flags (enum ibv_send_flags).
type SendFlags uint32

const (
	// SendFence is IBV_SEND_FENCE.
	SendFence SendFlags = 1 << 0
	// SendSignaled is IBV_SEND_SIGNALED.
	SendSignaled SendFlags = 1 << 1
	// SendSolicited is IBV_SEND_SOLICITED.
	SendSolicited SendFlags = 1 << 2
	// SendInline is IBV_SEND_INLINE.
	SendInline SendFlags = 1 << 3
	// SendIPCsum is IBV_SEND_IP_CSUM.
	SendIPCsum SendFlags = 1 << 4
)

var sendFlagNames = [32]string{
	0: "FENCE",
	1: "SIGNALED",
	2: "SOLICITED",
	3: "INLINE",
	4: "IP_CSUM",
}

// String joins the names of the set flags with "|", e.g. "SIGNALED|INLINE".
// Unknown bits are shown in hexadecimal; no flags prints "0".
func (f SendFlags) String() string { return flagsString(uint32(f), &sendFlagNames) }

// WCFlags is a set of work completion flags (enum ibv_wc_flags).
type WCFlags uint32

const (
	// WCFlagGRH is IBV_WC_GRH.
	WCFlagGRH WCFlags = 1 << 0
	// WCFlagWithImm is IBV_WC_WITH_IMM.
	WCFlagWithImm WCFlags = 1 << 1
	// WCFlagIPCsumOK is IBV_WC_IP_CSUM_OK.
	WCFlagIPCsumOK WCFlags = 1 << 2
	// WCFlagWithInv is IBV_WC_WITH_INV.
	WCFlagWithInv WCFlags = 1 << 3
)

var wcFlagNames = [32]string{
	0: "GRH",
	1: "WITH_IMM",
	2: "IP_CSUM_OK",
	3: "WITH_INV",
}

// String joins the names of the set flags with "|", e.g. "GRH|WITH_IMM".
// Unknown bits are shown in hexadecimal; no flags prints "0".
func (f WCFlags) String() string { return flagsString(uint32(f), &wcFlagNames) }

// AccessFlags is a set of memory access permissions (enum ibv_access_flags).
type AccessFlags uint32

const (
	// AccessLocalWrite is IBV_ACCESS_LOCAL_WRITE.
	AccessLocalWrite AccessFlags = 1 << 0
	// AccessRemoteWrite is IBV_ACCESS_REMOTE_WRITE.
	AccessRemoteWrite AccessFlags = 1 << 1
	// AccessRemoteRead is IBV_ACCESS_REMOTE_READ.
	AccessRemoteRead AccessFlags = 1 << 2
	// AccessRemoteAtomic is IBV_ACCESS_REMOTE_ATOMIC.
	AccessRemoteAtomic AccessFlags = 1 << 3
	// AccessMWBind is IBV_ACCESS_MW_BIND.
	AccessMWBind AccessFlags = 1 << 4
	// AccessZeroBased is IBV_ACCESS_ZERO_BASED.
	AccessZeroBased AccessFlags = 1 << 5
	// AccessOnDemand is IBV_ACCESS_ON_DEMAND.
	AccessOnDemand AccessFlags = 1 << 6
	// AccessHugetlb is IBV_ACCESS_HUGETLB.
	AccessHugetlb AccessFlags = 1 << 7
	// AccessFlushGlobal is IBV_ACCESS_FLUSH_GLOBAL: the region accepts
	// FLUSH requests of type FlushGlobal (visibility).
	AccessFlushGlobal AccessFlags = 1 << 8
	// AccessFlushPersistent is IBV_ACCESS_FLUSH_PERSISTENT: the region
	// accepts FLUSH requests of type FlushPersistent.
	AccessFlushPersistent AccessFlags = 1 << 9
	// AccessRelaxedOrdering is IBV_ACCESS_RELAXED_ORDERING
	// (IBV_ACCESS_OPTIONAL_FIRST, 1 << 20).
	AccessRelaxedOrdering AccessFlags = 1 << 20
)

var accessFlagNames = [32]string{
	0:  "LOCAL_WRITE",
	1:  "REMOTE_WRITE",
	2:  "REMOTE_READ",
	3:  "REMOTE_ATOMIC",
	4:  "MW_BIND",
	5:  "ZERO_BASED",
	6:  "ON_DEMAND",
	7:  "HUGETLB",
	8:  "FLUSH_GLOBAL",
	9:  "FLUSH_PERSISTENT",
	20: "RELAXED_ORDERING",
}

// String joins the names of the set flags with "|", e.g.
// "LOCAL_WRITE|REMOTE_READ". Unknown bits are shown in hexadecimal; no flags
// prints "0".
func (f AccessFlags) String() string { return flagsString(uint32(f), &accessFlagNames) }

// QPState is the state of a queue pair (enum ibv_qp_state).
type QPState uint32

const (
	// QPSReset is IBV_QPS_RESET.
	QPSReset QPState = 0
	// QPSInit is IBV_QPS_INIT.
	QPSInit QPState = 1
	// QPSRTR is IBV_QPS_RTR (ready to receive).
	QPSRTR QPState = 2
	// QPSRTS is IBV_QPS_RTS (ready to send).
	QPSRTS QPState = 3
	// QPSSQD is IBV_QPS_SQD (send queue drained).
	QPSSQD QPState = 4
	// QPSSQE is IBV_QPS_SQE (send queue error).
	QPSSQE QPState = 5
	// QPSErr is IBV_QPS_ERR.
	QPSErr QPState = 6
	// QPSUnknown is IBV_QPS_UNKNOWN.
	QPSUnknown QPState = 7
)

var qpStateNames = [...]string{
	QPSReset:   "RESET",
	QPSInit:    "INIT",
	QPSRTR:     "RTR",
	QPSRTS:     "RTS",
	QPSSQD:     "SQD",
	QPSSQE:     "SQE",
	QPSErr:     "ERR",
	QPSUnknown: "UNKNOWN",
}

// String returns the constant name without the IBV_QPS_ prefix, e.g. "RTS",
// or "QPState(n)" for a value outside the enumeration.
func (s QPState) String() string {
	return enumString(qpStateNames[:], int64(s), "QPState")
}

// QPType is the transport service type of a queue pair (enum ibv_qp_type).
type QPType uint32

const (
	// QPTRC is IBV_QPT_RC (reliable connection).
	QPTRC QPType = 2
	// QPTUC is IBV_QPT_UC (unreliable connection).
	QPTUC QPType = 3
	// QPTUD is IBV_QPT_UD (unreliable datagram).
	QPTUD QPType = 4
	// QPTRawPacket is IBV_QPT_RAW_PACKET.
	QPTRawPacket QPType = 8
	// QPTXRCSend is IBV_QPT_XRC_SEND.
	QPTXRCSend QPType = 9
	// QPTXRCRecv is IBV_QPT_XRC_RECV.
	QPTXRCRecv QPType = 10
)

var qpTypeNames = [...]string{
	QPTRC:        "RC",
	QPTUC:        "UC",
	QPTUD:        "UD",
	QPTRawPacket: "RAW_PACKET",
	QPTXRCSend:   "XRC_SEND",
	QPTXRCRecv:   "XRC_RECV",
}

// String returns the constant name without the IBV_QPT_ prefix, e.g. "RC",
// or "QPType(n)" for an unknown type.
func (t QPType) String() string {
	return enumString(qpTypeNames[:], int64(t), "QPType")
}

// QPAttrMask selects the queue pair attributes that ibv_modify_qp and
// ibv_query_qp act on (enum ibv_qp_attr_mask).
type QPAttrMask uint32

const (
	// QPAttrState is IBV_QP_STATE.
	QPAttrState QPAttrMask = 1 << 0
	// QPAttrCurState is IBV_QP_CUR_STATE.
	QPAttrCurState QPAttrMask = 1 << 1
	// QPAttrEnSQDAsyncNotify is IBV_QP_EN_SQD_ASYNC_NOTIFY.
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	// QPAttrAccessFlags is IBV_QP_ACCESS_FLAGS.
	QPAttrAccessFlags QPAttrMask = 1 << 3
	// QPAttrPKeyIndex is IBV_QP_PKEY_INDEX.
	QPAttrPKeyIndex QPAttrMask = 1 << 4
	// QPAttrPort is IBV_QP_PORT.
	QPAttrPort QPAttrMask = 1 << 5
	// QPAttrQKey is IBV_QP_QKEY.
	QPAttrQKey QPAttrMask = 1 << 6
	// QPAttrAV is IBV_QP_AV.
	QPAttrAV QPAttrMask = 1 << 7
	// QPAttrPathMTU is IBV_QP_PATH_MTU.
	QPAttrPathMTU QPAttrMask = 1 << 8
	// QPAttrTimeout is IBV_QP_TIMEOUT.
	QPAttrTimeout QPAttrMask = 1 << 9
	// QPAttrRetryCnt is IBV_QP_RETRY_CNT.
	QPAttrRetryCnt QPAttrMask = 1 << 10
	// QPAttrRNRRetry is IBV_QP_RNR_RETRY.
	QPAttrRNRRetry QPAttrMask = 1 << 11
	// QPAttrRQPSN is IBV_QP_RQ_PSN.
	QPAttrRQPSN QPAttrMask = 1 << 12
	// QPAttrMaxQPRdAtomic is IBV_QP_MAX_QP_RD_ATOMIC.
	QPAttrMaxQPRdAtomic QPAttrMask = 1 << 13
	// QPAttrAltPath is IBV_QP_ALT_PATH.
	QPAttrAltPath QPAttrMask = 1 << 14
	// QPAttrMinRNRTimer is IBV_QP_MIN_RNR_TIMER.
	QPAttrMinRNRTimer QPAttrMask = 1 << 15
	// QPAttrSQPSN is IBV_QP_SQ_PSN.
	QPAttrSQPSN QPAttrMask = 1 << 16
	// QPAttrMaxDestRdAtomic is IBV_QP_MAX_DEST_RD_ATOMIC.
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	// QPAttrPathMigState is IBV_QP_PATH_MIG_STATE.
	QPAttrPathMigState QPAttrMask = 1 << 18
	// QPAttrCap is IBV_QP_CAP.
	QPAttrCap QPAttrMask = 1 << 19
	// QPAttrDestQPN is IBV_QP_DEST_QPN.
	QPAttrDestQPN QPAttrMask = 1 << 20
	// QPAttrRateLimit is IBV_QP_RATE_LIMIT.
	QPAttrRateLimit QPAttrMask = 1 << 25
)

var qpAttrMaskNames = [32]string{
	0:  "STATE",
	1:  "CUR_STATE",
	2:  "EN_SQD_ASYNC_NOTIFY",
	3:  "ACCESS_FLAGS",
	4:  "PKEY_INDEX",
	5:  "PORT",
	6:  "QKEY",
	7:  "AV",
	8:  "PATH_MTU",
	9:  "TIMEOUT",
	10: "RETRY_CNT",
	11: "RNR_RETRY",
	12: "RQ_PSN",
	13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH",
	15: "MIN_RNR_TIMER",
	16: "SQ_PSN",
	17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE",
	19: "CAP",
	20: "DEST_QPN",
	25: "RATE_LIMIT",
}

// String joins the names of the set bits with "|", e.g.
// "STATE|PKEY_INDEX|PORT". Unknown bits are shown in hexadecimal; an empty
// mask prints "0".
func (m QPAttrMask) String() string { return flagsString(uint32(m), &qpAttrMaskNames) }

// MTU is a path MTU (enum ibv_mtu). Its values are codes, not byte counts;
// use Bytes and MTUFromBytes to convert.
type MTU uint32

const (
	// MTU256 is IBV_MTU_256.
	MTU256 MTU = 1
	// MTU512 is IBV_MTU_512.
	MTU512 MTU = 2
	// MTU1024 is IBV_MTU_1024.
	MTU1024 MTU = 3
	// MTU2048 is IBV_MTU_2048.
	MTU2048 MTU = 4
	// MTU4096 is IBV_MTU_4096.
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes (256 to 4096), or 0 for an unknown value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 256 << (m - MTU256)
}

// MTUFromBytes returns the MTU whose size is exactly n bytes. It reports
// false if n is not one of 256, 512, 1024, 2048 or 4096.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// String returns the size in bytes, e.g. "1024", or "MTU(n)" for an unknown
// value.
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return "MTU(" + strconv.FormatUint(uint64(m), 10) + ")"
}

// AtomicCap describes a device's atomic operation support
// (enum ibv_atomic_cap).
type AtomicCap uint32

const (
	// AtomicNone is IBV_ATOMIC_NONE.
	AtomicNone AtomicCap = 0
	// AtomicHCA is IBV_ATOMIC_HCA.
	AtomicHCA AtomicCap = 1
	// AtomicGlob is IBV_ATOMIC_GLOB.
	AtomicGlob AtomicCap = 2
)

var atomicCapNames = [...]string{
	AtomicNone: "NONE",
	AtomicHCA:  "HCA",
	AtomicGlob: "GLOB",
}

// String returns the constant name without the IBV_ATOMIC_ prefix, e.g.
// "HCA", or "AtomicCap(n)" for an unknown value.
func (c AtomicCap) String() string {
	return enumString(atomicCapNames[:], int64(c), "AtomicCap")
}

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint32

const (
	// EventCQErr is IBV_EVENT_CQ_ERR.
	EventCQErr EventType = 0
	// EventQPFatal is IBV_EVENT_QP_FATAL.
	EventQPFatal EventType = 1
	// EventQPReqErr is IBV_EVENT_QP_REQ_ERR.
	EventQPReqErr EventType = 2
	// EventQPAccessErr is IBV_EVENT_QP_ACCESS_ERR.
	EventQPAccessErr EventType = 3
	// EventCommEst is IBV_EVENT_COMM_EST.
	EventCommEst EventType = 4
	// EventSQDrained is IBV_EVENT_SQ_DRAINED.
	EventSQDrained EventType = 5
	// EventPathMig is IBV_EVENT_PATH_MIG.
	EventPathMig EventType = 6
	// EventPathMigErr is IBV_EVENT_PATH_MIG_ERR.
	EventPathMigErr EventType = 7
	// EventDeviceFatal is IBV_EVENT_DEVICE_FATAL.
	EventDeviceFatal EventType = 8
	// EventPortActive is IBV_EVENT_PORT_ACTIVE.
	EventPortActive EventType = 9
	// EventPortErr is IBV_EVENT_PORT_ERR.
	EventPortErr EventType = 10
	// EventLIDChange is IBV_EVENT_LID_CHANGE.
	EventLIDChange EventType = 11
	// EventPKeyChange is IBV_EVENT_PKEY_CHANGE.
	EventPKeyChange EventType = 12
	// EventSMChange is IBV_EVENT_SM_CHANGE.
	EventSMChange EventType = 13
	// EventSRQErr is IBV_EVENT_SRQ_ERR.
	EventSRQErr EventType = 14
	// EventSRQLimitReached is IBV_EVENT_SRQ_LIMIT_REACHED.
	EventSRQLimitReached EventType = 15
	// EventQPLastWQEReached is IBV_EVENT_QP_LAST_WQE_REACHED.
	EventQPLastWQEReached EventType = 16
	// EventClientReregister is IBV_EVENT_CLIENT_REREGISTER.
	EventClientReregister EventType = 17
	// EventGIDChange is IBV_EVENT_GID_CHANGE.
	EventGIDChange EventType = 18
	// EventWQFatal is IBV_EVENT_WQ_FATAL.
	EventWQFatal EventType = 19
)

var eventTypeText = [...]string{
	EventCQErr:            "CQ error",
	EventQPFatal:          "local work queue catastrophic error",
	EventQPReqErr:         "invalid request local work queue error",
	EventQPAccessErr:      "local access violation work queue error",
	EventCommEst:          "communication established",
	EventSQDrained:        "send queue drained",
	EventPathMig:          "path migrated",
	EventPathMigErr:       "path migration request error",
	EventDeviceFatal:      "local catastrophic error",
	EventPortActive:       "port active",
	EventPortErr:          "port error",
	EventLIDChange:        "LID change",
	EventPKeyChange:       "P_Key change",
	EventSMChange:         "SM change",
	EventSRQErr:           "SRQ catastrophic error",
	EventSRQLimitReached:  "SRQ limit reached",
	EventQPLastWQEReached: "last WQE reached",
	EventClientReregister: "client reregistration",
	EventGIDChange:        "GID table change",
	EventWQFatal:          "WQ fatal",
}

// String returns the same text as ibv_event_type_str, or "EventType(n)" for
// an unknown event type.
func (e EventType) String() string {
	return enumString(eventTypeText[:], int64(e), "EventType")
}

// PortState is the logical state of a port (enum ibv_port_state).
type PortState uint32

const (
	// PortNop is IBV_PORT_NOP.
	PortNop PortState = 0
	// PortDown is IBV_PORT_DOWN.
	PortDown PortState = 1
	// PortInit is IBV_PORT_INIT.
	PortInit PortState = 2
	// PortArmed is IBV_PORT_ARMED.
	PortArmed PortState = 3
	// PortActive is IBV_PORT_ACTIVE.
	PortActive PortState = 4
	// PortActiveDefer is IBV_PORT_ACTIVE_DEFER.
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{
	PortNop:         "PORT_NOP",
	PortDown:        "PORT_DOWN",
	PortInit:        "PORT_INIT",
	PortArmed:       "PORT_ARMED",
	PortActive:      "PORT_ACTIVE",
	PortActiveDefer: "PORT_ACTIVE_DEFER",
}

// String returns the constant name without the IBV_ prefix, e.g.
// "PORT_ACTIVE" (the form ibv_devinfo prints), or "PortState(n)" for an
// unknown state. Note that libibverbs' ibv_port_state_str returns different,
// lower-case text ("active", "down", ...).
func (s PortState) String() string {
	return enumString(portStateNames[:], int64(s), "PortState")
}

// LinkLayer is the link layer protocol of a port (IBV_LINK_LAYER_*).
type LinkLayer uint8

const (
	// LinkLayerUnspecified is IBV_LINK_LAYER_UNSPECIFIED.
	LinkLayerUnspecified LinkLayer = 0
	// LinkLayerInfiniBand is IBV_LINK_LAYER_INFINIBAND.
	LinkLayerInfiniBand LinkLayer = 1
	// LinkLayerEthernet is IBV_LINK_LAYER_ETHERNET.
	LinkLayerEthernet LinkLayer = 2
)

var linkLayerNames = [...]string{
	LinkLayerUnspecified: "Unspecified",
	LinkLayerInfiniBand:  "InfiniBand",
	LinkLayerEthernet:    "Ethernet",
}

// String returns "Unspecified", "InfiniBand" or "Ethernet", or
// "LinkLayer(n)" for an unknown value.
func (l LinkLayer) String() string {
	return enumString(linkLayerNames[:], int64(l), "LinkLayer")
}

// NodeType is the type of an RDMA device node (enum ibv_node_type).
type NodeType int

const (
	// NodeUnknown is IBV_NODE_UNKNOWN.
	NodeUnknown NodeType = -1
	// NodeCA is IBV_NODE_CA (channel adapter).
	NodeCA NodeType = 1
	// NodeSwitch is IBV_NODE_SWITCH.
	NodeSwitch NodeType = 2
	// NodeRouter is IBV_NODE_ROUTER.
	NodeRouter NodeType = 3
	// NodeRNIC is IBV_NODE_RNIC (iWARP NIC).
	NodeRNIC NodeType = 4
	// NodeUSNIC is IBV_NODE_USNIC.
	NodeUSNIC NodeType = 5
	// NodeUSNICUDP is IBV_NODE_USNIC_UDP.
	NodeUSNICUDP NodeType = 6
	// NodeUnspecified is IBV_NODE_UNSPECIFIED.
	NodeUnspecified NodeType = 7
)

var nodeTypeText = [...]string{
	NodeCA:          "InfiniBand channel adapter",
	NodeSwitch:      "InfiniBand switch",
	NodeRouter:      "InfiniBand router",
	NodeRNIC:        "iWARP NIC",
	NodeUSNIC:       "usNIC",
	NodeUSNICUDP:    "usNIC UDP",
	NodeUnspecified: "unspecified",
}

// String returns the same text as ibv_node_type_str ("unknown" for
// NodeUnknown), or "NodeType(n)" for a value outside the enumeration.
func (t NodeType) String() string {
	if t == NodeUnknown {
		return "unknown"
	}
	return enumString(nodeTypeText[:], int64(t), "NodeType")
}

// TransportType is the transport of an RDMA device
// (enum ibv_transport_type).
type TransportType int

const (
	// TransportUnknown is IBV_TRANSPORT_UNKNOWN.
	TransportUnknown TransportType = -1
	// TransportIB is IBV_TRANSPORT_IB.
	TransportIB TransportType = 0
	// TransportIWARP is IBV_TRANSPORT_IWARP.
	TransportIWARP TransportType = 1
	// TransportUSNIC is IBV_TRANSPORT_USNIC.
	TransportUSNIC TransportType = 2
	// TransportUSNICUDP is IBV_TRANSPORT_USNIC_UDP.
	TransportUSNICUDP TransportType = 3
	// TransportUnspecified is IBV_TRANSPORT_UNSPECIFIED.
	TransportUnspecified TransportType = 4
)

var transportTypeText = [...]string{
	TransportIB:          "InfiniBand",
	TransportIWARP:       "iWARP",
	TransportUSNIC:       "usNIC",
	TransportUSNICUDP:    "usNIC UDP",
	TransportUnspecified: "unspecified",
}

// String returns a description such as "InfiniBand" or "iWARP" ("unknown"
// for TransportUnknown), or "TransportType(n)" for a value outside the
// enumeration.
func (t TransportType) String() string {
	if t == TransportUnknown {
		return "unknown"
	}
	return enumString(transportTypeText[:], int64(t), "TransportType")
}
