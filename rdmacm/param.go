package rdmacm

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/defaults"
	"github.com/goverbs/goverbs/verbs"
)

// ConnParam are the connection parameters (struct rdma_conn_param). Its
// zero value, like a nil *ConnParam, asks for what a connection needs to
// do everything: the most RDMA reads and atomics each way, the transport's
// retries and receiver-not-ready retries for ever. A negative field asks
// for none (0 in C's struct): InitiatorDepth: -1 for a side that never
// reads.
type ConnParam struct {
	// PrivateData goes with the request, accept or reject (private_data).
	PrivateData []byte
	// ResponderResources (responder_resources, IRD) is the number of RDMA
	// reads and atomics this side serves at once; 0 means the device
	// maximum, as MaxDepth (RDMA_MAX_RESP_RES) does.
	ResponderResources int
	// InitiatorDepth (initiator_depth, ORD) is the number this side
	// issues at once; 0 means the device maximum (MaxDepth,
	// RDMA_MAX_INIT_DEPTH).
	InitiatorDepth int
	// RetryCount (retry_count) is the QP's transport retries over RoCE,
	// 7 at most; 0 means 7. iWARP (TCP) and shared memory have no
	// retries.
	RetryCount int
	// RNRRetryCount (rnr_retry_count) is how often the peer retries a
	// SEND that finds no receive posted, 7 at most (7: for ever); 0
	// means 7.
	RNRRetryCount int
	// Extensions (Connect only) offers the provider's extensions: over
	// iWARP, RFC 7306 immediate data and atomics, which only goverbs peers
	// speak. Leave it off towards other peers (see package iwarp).
	Extensions bool
}

// MaxDepth is RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH: the device maximum.
// A zero ConnParam field means the same.
const MaxDepth = 0xFF

// deviceDepth is what MaxDepth stands for: the most any provider serves.
const deviceDepth = 128

func params(p *ConnParam, maxPD int) (cm.Params, error) {
	if p == nil {
		p = &ConnParam{}
	}
	if len(p.PrivateData) > maxPD {
		return cm.Params{}, fmt.Errorf("%w: %d bytes of private data (the transport carries %d)", errInvalid, len(p.PrivateData), maxPD)
	}
	depth := func(v int) int {
		if v == MaxDepth {
			return deviceDepth
		}
		return min(defaults.Int(v, deviceDepth), deviceDepth)
	}
	retry := func(v int) uint8 { return uint8(min(defaults.Int(v, 7), 7)) }
	return cm.Params{PrivateData: p.PrivateData, IRD: depth(p.ResponderResources), ORD: depth(p.InitiatorDepth),
		Extensions: p.Extensions, RNRRetry: retry(p.RNRRetryCount), RetryCount: retry(p.RetryCount)}, nil
}

// defaultQPAttr is Dial's QP: attr, or a zero QPInitAttr when attr is nil,
// whose zero fields CreateQP fills in.
func defaultQPAttr(attr *verbs.QPInitAttr) verbs.QPInitAttr {
	if attr != nil {
		return *attr
	}
	return verbs.QPInitAttr{}
}
