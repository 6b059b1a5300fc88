package verbs

import (
	"fmt"
	"testing"
)

// enumCase pairs a value with the number libibverbs uses for it and the text
// its String method must return.
type enumCase struct {
	v    fmt.Stringer
	c    int64
	want string
}

// enumValue converts any of the enum types of this package to int64.
func enumValue(t *testing.T, v fmt.Stringer) int64 {
	t.Helper()
	switch x := v.(type) {
	case WCStatus:
		return int64(x)
	case WCOpcode:
		return int64(x)
	case WROpcode:
		return int64(x)
	case SendFlags:
		return int64(x)
	case WCFlags:
		return int64(x)
	case AccessFlags:
		return int64(x)
	case QPState:
		return int64(x)
	case QPType:
		return int64(x)
	case QPAttrMask:
		return int64(x)
	case MTU:
		return int64(x)
	case AtomicCap:
		return int64(x)
	case EventType:
		return int64(x)
	case PortState:
		return int64(x)
	case LinkLayer:
		return int64(x)
	case NodeType:
		return int64(x)
	case TransportType:
		return int64(x)
	}
	t.Fatalf("unexpected type %T", v)
	return 0
}

func TestEnumValuesAndStrings(t *testing.T) {
	cases := []enumCase{
		{WCSuccess, 0, "success"},
		{WCLocLenErr, 1, "local length error"},
		{WCLocQPOpErr, 2, "local QP operation error"},
		{WCLocEECOpErr, 3, "local EE context operation error"},
		{WCLocProtErr, 4, "local protection error"},
		{WCWRFlushErr, 5, "Work Request Flushed Error"},
		{WCMWBindErr, 6, "memory management operation error"},
		{WCBadRespErr, 7, "bad response error"},
		{WCLocAccessErr, 8, "local access error"},
		{WCRemInvReqErr, 9, "remote invalid request error"},
		{WCRemAccessErr, 10, "remote access error"},
		{WCRemOpErr, 11, "remote operation error"},
		{WCRetryExcErr, 12, "transport retry counter exceeded"},
		{WCRNRRetryExcErr, 13, "RNR retry counter exceeded"},
		{WCLocRDDViolErr, 14, "local RDD violation error"},
		{WCRemInvRDReqErr, 15, "remote invalid RD request"},
		{WCRemAbortErr, 16, "aborted error"},
		{WCInvEECNErr, 17, "invalid EE context number"},
		{WCInvEECStateErr, 18, "invalid EE context state"},
		{WCFatalErr, 19, "fatal error"},
		{WCRespTimeoutErr, 20, "response timeout error"},
		{WCGeneralErr, 21, "general error"},
		{WCTMErr, 22, "TM error"},
		{WCTMRndvIncomplete, 23, "TM software rendezvous"},

		{WCSend, 0, "SEND"},
		{WCRDMAWrite, 1, "RDMA_WRITE"},
		{WCRDMARead, 2, "RDMA_READ"},
		{WCCompSwap, 3, "COMP_SWAP"},
		{WCFetchAdd, 4, "FETCH_ADD"},
		{WCBindMW, 5, "BIND_MW"},
		{WCLocalInv, 6, "LOCAL_INV"},
		{WCTSO, 7, "TSO"},
		{WCRecv, 128, "RECV"},
		{WCRecvRDMAWithImm, 129, "RECV_RDMA_WITH_IMM"},

		{WRRDMAWrite, 0, "RDMA_WRITE"},
		{WRRDMAWriteWithImm, 1, "RDMA_WRITE_WITH_IMM"},
		{WRSend, 2, "SEND"},
		{WRSendWithImm, 3, "SEND_WITH_IMM"},
		{WRRDMARead, 4, "RDMA_READ"},
		{WRAtomicCmpAndSwp, 5, "ATOMIC_CMP_AND_SWP"},
		{WRAtomicFetchAndAdd, 6, "ATOMIC_FETCH_AND_ADD"},
		{WRLocalInv, 7, "LOCAL_INV"},
		{WRBindMW, 8, "BIND_MW"},
		{WRSendWithInv, 9, "SEND_WITH_INV"},

		{SendFence, 1, "FENCE"},
		{SendSignaled, 2, "SIGNALED"},
		{SendSolicited, 4, "SOLICITED"},
		{SendInline, 8, "INLINE"},
		{SendIPCsum, 16, "IP_CSUM"},

		{WCFlagGRH, 1, "GRH"},
		{WCFlagWithImm, 2, "WITH_IMM"},
		{WCFlagIPCsumOK, 4, "IP_CSUM_OK"},
		{WCFlagWithInv, 8, "WITH_INV"},

		{AccessLocalWrite, 1, "LOCAL_WRITE"},
		{AccessRemoteWrite, 2, "REMOTE_WRITE"},
		{AccessRemoteRead, 4, "REMOTE_READ"},
		{AccessRemoteAtomic, 8, "REMOTE_ATOMIC"},
		{AccessMWBind, 16, "MW_BIND"},
		{AccessZeroBased, 32, "ZERO_BASED"},
		{AccessOnDemand, 64, "ON_DEMAND"},
		{AccessHugetlb, 128, "HUGETLB"},
		{AccessFlushGlobal, 256, "FLUSH_GLOBAL"},
		{AccessFlushPersistent, 512, "FLUSH_PERSISTENT"},
		{AccessRelaxedOrdering, 1 << 20, "RELAXED_ORDERING"},

		{QPSReset, 0, "RESET"},
		{QPSInit, 1, "INIT"},
		{QPSRTR, 2, "RTR"},
		{QPSRTS, 3, "RTS"},
		{QPSSQD, 4, "SQD"},
		{QPSSQE, 5, "SQE"},
		{QPSErr, 6, "ERR"},
		{QPSUnknown, 7, "UNKNOWN"},

		{QPTRC, 2, "RC"},
		{QPTUC, 3, "UC"},
		{QPTUD, 4, "UD"},
		{QPTRawPacket, 8, "RAW_PACKET"},
		{QPTXRCSend, 9, "XRC_SEND"},
		{QPTXRCRecv, 10, "XRC_RECV"},

		{QPAttrState, 1 << 0, "STATE"},
		{QPAttrCurState, 1 << 1, "CUR_STATE"},
		{QPAttrEnSQDAsyncNotify, 1 << 2, "EN_SQD_ASYNC_NOTIFY"},
		{QPAttrAccessFlags, 1 << 3, "ACCESS_FLAGS"},
		{QPAttrPKeyIndex, 1 << 4, "PKEY_INDEX"},
		{QPAttrPort, 1 << 5, "PORT"},
		{QPAttrQKey, 1 << 6, "QKEY"},
		{QPAttrAV, 1 << 7, "AV"},
		{QPAttrPathMTU, 1 << 8, "PATH_MTU"},
		{QPAttrTimeout, 1 << 9, "TIMEOUT"},
		{QPAttrRetryCnt, 1 << 10, "RETRY_CNT"},
		{QPAttrRNRRetry, 1 << 11, "RNR_RETRY"},
		{QPAttrRQPSN, 1 << 12, "RQ_PSN"},
		{QPAttrMaxQPRdAtomic, 1 << 13, "MAX_QP_RD_ATOMIC"},
		{QPAttrAltPath, 1 << 14, "ALT_PATH"},
		{QPAttrMinRNRTimer, 1 << 15, "MIN_RNR_TIMER"},
		{QPAttrSQPSN, 1 << 16, "SQ_PSN"},
		{QPAttrMaxDestRdAtomic, 1 << 17, "MAX_DEST_RD_ATOMIC"},
		{QPAttrPathMigState, 1 << 18, "PATH_MIG_STATE"},
		{QPAttrCap, 1 << 19, "CAP"},
		{QPAttrDestQPN, 1 << 20, "DEST_QPN"},
		{QPAttrRateLimit, 1 << 25, "RATE_LIMIT"},

		{MTU256, 1, "256"},
		{MTU512, 2, "512"},
		{MTU1024, 3, "1024"},
		{MTU2048, 4, "2048"},
		{MTU4096, 5, "4096"},

		{AtomicNone, 0, "NONE"},
		{AtomicHCA, 1, "HCA"},
		{AtomicGlob, 2, "GLOB"},

		{EventCQErr, 0, "CQ error"},
		{EventQPFatal, 1, "local work queue catastrophic error"},
		{EventQPReqErr, 2, "invalid request local work queue error"},
		{EventQPAccessErr, 3, "local access violation work queue error"},
		{EventCommEst, 4, "communication established"},
		{EventSQDrained, 5, "send queue drained"},
		{EventPathMig, 6, "path migrated"},
		{EventPathMigErr, 7, "path migration request error"},
		{EventDeviceFatal, 8, "local catastrophic error"},
		{EventPortActive, 9, "port active"},
		{EventPortErr, 10, "port error"},
		{EventLIDChange, 11, "LID change"},
		{EventPKeyChange, 12, "P_Key change"},
		{EventSMChange, 13, "SM change"},
		{EventSRQErr, 14, "SRQ catastrophic error"},
		{EventSRQLimitReached, 15, "SRQ limit reached"},
		{EventQPLastWQEReached, 16, "last WQE reached"},
		{EventClientReregister, 17, "client reregistration"},
		{EventGIDChange, 18, "GID table change"},
		{EventWQFatal, 19, "WQ fatal"},

		{PortNop, 0, "PORT_NOP"},
		{PortDown, 1, "PORT_DOWN"},
		{PortInit, 2, "PORT_INIT"},
		{PortArmed, 3, "PORT_ARMED"},
		{PortActive, 4, "PORT_ACTIVE"},
		{PortActiveDefer, 5, "PORT_ACTIVE_DEFER"},

		{LinkLayerUnspecified, 0, "Unspecified"},
		{LinkLayerInfiniBand, 1, "InfiniBand"},
		{LinkLayerEthernet, 2, "Ethernet"},

		{NodeUnknown, -1, "unknown"},
		{NodeCA, 1, "InfiniBand channel adapter"},
		{NodeSwitch, 2, "InfiniBand switch"},
		{NodeRouter, 3, "InfiniBand router"},
		{NodeRNIC, 4, "iWARP NIC"},
		{NodeUSNIC, 5, "usNIC"},
		{NodeUSNICUDP, 6, "usNIC UDP"},
		{NodeUnspecified, 7, "unspecified"},

		{TransportUnknown, -1, "unknown"},
		{TransportIB, 0, "InfiniBand"},
		{TransportIWARP, 1, "iWARP"},
		{TransportUSNIC, 2, "usNIC"},
		{TransportUSNICUDP, 3, "usNIC UDP"},
		{TransportUnspecified, 4, "unspecified"},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%T/%s", tc.v, tc.want)
		if got := enumValue(t, tc.v); got != tc.c {
			t.Errorf("%s: value = %d, want %d", name, got, tc.c)
		}
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%s: String() = %q, want %q", name, got, tc.want)
		}
	}
}

func TestEnumWCStatusName(t *testing.T) {
	cases := []struct {
		s    WCStatus
		want string
	}{
		{WCSuccess, "IBV_WC_SUCCESS"},
		{WCLocLenErr, "IBV_WC_LOC_LEN_ERR"},
		{WCWRFlushErr, "IBV_WC_WR_FLUSH_ERR"},
		{WCRNRRetryExcErr, "IBV_WC_RNR_RETRY_EXC_ERR"},
		{WCRemInvRDReqErr, "IBV_WC_REM_INV_RD_REQ_ERR"},
		{WCInvEECStateErr, "IBV_WC_INV_EEC_STATE_ERR"},
		{WCGeneralErr, "IBV_WC_GENERAL_ERR"},
		{WCTMRndvIncomplete, "IBV_WC_TM_RNDV_INCOMPLETE"},
		{WCStatus(99), "WCStatus(99)"},
	}
	for _, tc := range cases {
		if got := tc.s.Name(); got != tc.want {
			t.Errorf("WCStatus(%d).Name() = %q, want %q", uint32(tc.s), got, tc.want)
		}
	}
	// Every defined status has both a name and a text.
	for s := WCSuccess; s <= WCTMRndvIncomplete; s++ {
		if s.Name() == fmt.Sprintf("WCStatus(%d)", uint32(s)) ||
			s.String() == fmt.Sprintf("WCStatus(%d)", uint32(s)) {
			t.Errorf("WCStatus(%d) lacks a name or text", uint32(s))
		}
	}
}

func TestEnumUnknownValues(t *testing.T) {
	cases := []struct {
		v    fmt.Stringer
		want string
	}{
		{WCStatus(99), "WCStatus(99)"},
		{WCStatus(24), "WCStatus(24)"},
		{WCStatus(^uint32(0)), "WCStatus(4294967295)"},
		{WCOpcode(10), "WCOpcode(10)"},
		{WCOpcode(127), "WCOpcode(127)"},
		{WCOpcode(130), "WCOpcode(130)"},
		{WCOpcode(^uint32(0)), "WCOpcode(4294967295)"},
		{WROpcode(10), "WROpcode(10)"},
		{QPState(8), "QPState(8)"},
		{QPType(0), "QPType(0)"},
		{QPType(5), "QPType(5)"},
		{QPType(11), "QPType(11)"},
		{QPType(0xff), "QPType(255)"},
		{MTU(0), "MTU(0)"},
		{MTU(6), "MTU(6)"},
		{AtomicCap(3), "AtomicCap(3)"},
		{EventType(20), "EventType(20)"},
		{PortState(6), "PortState(6)"},
		{LinkLayer(3), "LinkLayer(3)"},
		{LinkLayer(255), "LinkLayer(255)"},
		{NodeType(0), "NodeType(0)"},
		{NodeType(8), "NodeType(8)"},
		{NodeType(-2), "NodeType(-2)"},
		{TransportType(5), "TransportType(5)"},
		{TransportType(-2), "TransportType(-2)"},
	}
	for _, tc := range cases {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%T.String() = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestEnumFlagsJoin(t *testing.T) {
	cases := []struct {
		v    fmt.Stringer
		want string
	}{
		{SendFlags(0), "0"},
		{SendSignaled | SendInline, "SIGNALED|INLINE"},
		{SendFence | SendSignaled | SendSolicited | SendInline | SendIPCsum,
			"FENCE|SIGNALED|SOLICITED|INLINE|IP_CSUM"},
		{SendSignaled | 0x100, "SIGNALED|0x100"},
		{SendFlags(0x60), "0x60"},
		{WCFlags(0), "0"},
		{WCFlagGRH | WCFlagWithImm, "GRH|WITH_IMM"},
		{WCFlagWithInv | 0x10, "WITH_INV|0x10"},
		{AccessFlags(0), "0"},
		{AccessLocalWrite | AccessRemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic,
			"LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"},
		{AccessRemoteWrite | AccessRelaxedOrdering, "REMOTE_WRITE|RELAXED_ORDERING"},
		{AccessLocalWrite | 0xC00, "LOCAL_WRITE|0xc00"},
		{AccessFlags(1 << 31), "0x80000000"},
		{QPAttrMask(0), "0"},
		{QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
			"STATE|ACCESS_FLAGS|PKEY_INDEX|PORT"},
		{QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN |
			QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			"STATE|AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN"},
		{QPAttrRateLimit | 1<<21 | 1<<24, "RATE_LIMIT|0x1200000"},
		{QPAttrMask(^uint32(0)),
			"STATE|CUR_STATE|EN_SQD_ASYNC_NOTIFY|ACCESS_FLAGS|PKEY_INDEX|PORT|QKEY|AV|" +
				"PATH_MTU|TIMEOUT|RETRY_CNT|RNR_RETRY|RQ_PSN|MAX_QP_RD_ATOMIC|ALT_PATH|" +
				"MIN_RNR_TIMER|SQ_PSN|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE|CAP|DEST_QPN|" +
				"RATE_LIMIT|0xfde00000"},
	}
	for _, tc := range cases {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%T(%#x).String() = %q, want %q", tc.v, enumValue(t, tc.v), got, tc.want)
		}
	}
}

func TestEnumMTU(t *testing.T) {
	cases := []struct {
		m     MTU
		bytes int
	}{
		{MTU256, 256},
		{MTU512, 512},
		{MTU1024, 1024},
		{MTU2048, 2048},
		{MTU4096, 4096},
	}
	for _, tc := range cases {
		if got := tc.m.Bytes(); got != tc.bytes {
			t.Errorf("%v.Bytes() = %d, want %d", tc.m, got, tc.bytes)
		}
		m, ok := MTUFromBytes(tc.bytes)
		if !ok || m != tc.m {
			t.Errorf("MTUFromBytes(%d) = %v, %v; want %v, true", tc.bytes, m, ok, tc.m)
		}
		if back, ok := MTUFromBytes(m.Bytes()); !ok || back != m {
			t.Errorf("round trip of %v gave %v, %v", m, back, ok)
		}
	}
	for _, m := range []MTU{0, 6, 100, MTU(^uint32(0))} {
		if got := m.Bytes(); got != 0 {
			t.Errorf("MTU(%d).Bytes() = %d, want 0", uint32(m), got)
		}
	}
	for _, n := range []int{-1, 0, 1, 128, 255, 257, 1500, 3000, 8192, 9000} {
		if m, ok := MTUFromBytes(n); ok || m != 0 {
			t.Errorf("MTUFromBytes(%d) = %v, %v; want 0, false", n, m, ok)
		}
	}
}

func TestEnumWROpcodeWCOpcode(t *testing.T) {
	cases := []struct {
		wr WROpcode
		wc WCOpcode
	}{
		{WRRDMAWrite, WCRDMAWrite},
		{WRRDMAWriteWithImm, WCRDMAWrite},
		{WRSend, WCSend},
		{WRSendWithImm, WCSend},
		{WRSendWithInv, WCSend},
		{WRRDMARead, WCRDMARead},
		{WRAtomicCmpAndSwp, WCCompSwap},
		{WRAtomicFetchAndAdd, WCFetchAdd},
		{WRLocalInv, WCLocalInv},
		{WRBindMW, WCBindMW},
		{WRFlush, WCFlush},
		{WRAtomicWrite, WCAtomicWrite},
	}
	for _, tc := range cases {
		if got := tc.wr.WCOpcode(); got != tc.wc {
			t.Errorf("%v.WCOpcode() = %v, want %v", tc.wr, got, tc.wc)
		}
	}
	for _, wr := range []WROpcode{10, 11, 13, 16, WROpcode(^uint32(0))} {
		got := wr.WCOpcode()
		if got != WCOpcode(^uint32(0)) {
			t.Errorf("%v.WCOpcode() = %v, want WCOpcode(4294967295)", wr, got)
		}
	}
}
