package rdmacm

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/verbs"
)

// ConnParam are the connection parameters (struct rdma_conn_param).
type ConnParam struct {
	PrivateData []byte
	// ResponderResources is the number of RDMA reads/atomics this side accepts
	// outstanding (IRD); InitiatorDepth the number it issues (ORD). 0xFF (or
	// a nil *ConnParam) means the device maximum, as in librdmacm.
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // retry_cnt of the QP over RoCE (0 means 7); iWARP (TCP) and shm have no retries
	RNRRetryCount      uint8 // rnr_retry of the QP (7: retry for ever); a nil *ConnParam means 7
	// Extensions (Connect only) offers the provider's extensions: over
	// iWARP, RFC 7306 immediate data and atomics, which only goverbs peers
	// speak. Leave it off towards other peers (see package iwarp).
	Extensions bool
}

// MaxDepth is RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH: the device maximum.
const MaxDepth = 0xFF

func params(p *ConnParam, maxPD int) (cm.Params, error) {
	if p == nil {
		return cm.Params{IRD: 128, ORD: 128, RNRRetry: 7}, nil
	}
	if len(p.PrivateData) > maxPD {
		return cm.Params{}, fmt.Errorf("%w: %d bytes of private data (the transport carries %d)", verbs.ErrInvalid, len(p.PrivateData), maxPD)
	}
	cp := cm.Params{PrivateData: p.PrivateData, IRD: int(p.ResponderResources), ORD: int(p.InitiatorDepth), Extensions: p.Extensions,
		RNRRetry: min(p.RNRRetryCount, 7), RetryCount: min(p.RetryCount, 7)}
	if p.ResponderResources == MaxDepth {
		cp.IRD = 128
	}
	if p.InitiatorDepth == MaxDepth {
		cp.ORD = 128
	}
	return cp, nil
}

func defaultQPAttr(attr *verbs.QPInitAttr) verbs.QPInitAttr {
	if attr != nil {
		return *attr
	}
	return verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
}

// Listen creates a listening identifier at addr (rdma_create_id +
