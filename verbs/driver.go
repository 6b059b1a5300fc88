package verbs

import (
	"context"

	"github.com/goverbs/goverbs/verbs/internal/registry"
)

// The provider interface, as package verbs holds it. Package verbs/driver
// publishes the same interfaces to providers (driver.QP, driver.CQ, ...):
// each is an alias of an interface literal, and identical literals are one
// type, so the objects a provider returns are used here as they are. A
// method changed here must change there too: verbs would no longer
// recognise the provider's objects, which verbs/driver's test and every
// provider's conformance tests catch.

type providerDriver = interface {
	Devices() []deviceDriver
}

type deviceDriver = interface {
	Name() string
	GUID() uint64
	NodeType() NodeType
	TransportType() TransportType
	Open() (contextDriver, error)
}

type contextDriver = interface {
	QueryDevice() DeviceAttr
	QueryPort(port uint8) (PortAttr, error)
	QueryGID(port uint8, index int) (GID, error)
	AllocPD(pd *PD) (pdDriver, error)
	CreateCompChannel(ch *CompChannel) (compChannelDriver, error)
	CreateCQ(cq *CQ, cqe int, ch compChannelDriver) (cqDriver, error)
	AsyncEvent(ctx context.Context) (AsyncEvent, error)
	Close() error
}

type pdDriver = interface {
	RegMR(mr *MR, buf []byte, addr uint64, access AccessFlags) (mrDriver, error)
	CreateQP(qp *QP, attr *QPInitAttr) (qpDriver, error)
	CreateSRQ(srq *SRQ, attr *SRQInitAttr) (srqDriver, error)
	CreateAH(ah *AH, attr *AHAttr) (ahDriver, error)
	Dealloc() error
}

type mrDriver = interface {
	LKey() uint32
	RKey() uint32
	Dereg() error
}

type compChannelDriver = interface {
	GetEvent(ctx context.Context) (*CQ, error)
	Fd() int
	Close() error
}

type cqDriver = interface {
	Poll(wc []WC) (int, error)
	ReqNotify(solicitedOnly bool) error
	Wait(ctx context.Context) error
	CQE() int
	Destroy() error
}

type qpDriver = interface {
	Num() uint32
	PostSend(wr []SendWR) error
	PostRecv(wr []RecvWR) error
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query() (QPAttr, QPInitAttr, error)
	Destroy() error
}

type srqDriver = interface {
	PostRecv(wr []RecvWR) error
	Modify(attr *SRQAttr, mask SRQAttrMask) error
	Query() (SRQAttr, error)
	Destroy() error
}

type ahDriver = interface {
	Destroy() error
}

func init() {
	registry.Unwrap = unwrap
}

// unwrap is registry.Unwrap: the provider object behind a verbs object.
func unwrap(obj any) any {
	switch o := obj.(type) {
	case *QP:
		if o != nil {
			return o.d
		}
	case *CQ:
		if o != nil {
			return o.d
		}
	case *SRQ:
		if o != nil {
			return o.d
		}
	case *AH:
		if o != nil {
			return o.d
		}
	case *MR:
		if o != nil {
			return o.d
		}
	case *MW:
		if o != nil {
			return o.d
		}
	}
	return nil
}

func providers() []providerDriver {
	var ps []providerDriver
	for _, p := range registry.Providers() {
		if pd, ok := p.(providerDriver); ok {
			ps = append(ps, pd)
		}
	}
	return ps
}
