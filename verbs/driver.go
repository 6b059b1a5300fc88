package verbs

import (
	"context"
	"sort"
	"sync"
)

// This file is the provider interface: what a provider implements so that the
// objects of this package run on it, in the way libibverbs' verbs_context_ops
// connect the library to a driver. Applications do not use it. The pure-Go
// providers implement it once, in goverbs' internal engine; a provider never
// has to repeat the argument checks done here.

// Provider is a source of devices, registered with RegisterProvider.
type Provider interface {
	// Devices lists the provider's devices now.
	Devices() []DeviceDriver
}

// DeviceDriver is one device of a provider.
type DeviceDriver interface {
	Name() string
	GUID() uint64
	NodeType() NodeType
	TransportType() TransportType
	// Open returns a new context on the device.
	Open() (ContextDriver, error)
}

// ContextDriver is an opened device (struct ibv_context).
type ContextDriver interface {
	QueryDevice() DeviceAttr
	QueryPort(port uint8) (PortAttr, error)
	QueryGID(port uint8, index int) (GID, error)
	AllocPD(pd *PD) (PDDriver, error)
	CreateCompChannel(ch *CompChannel) (CompChannelDriver, error)
	// CreateCQ creates a CQ with at least cqe entries; ch may be nil.
	CreateCQ(cq *CQ, cqe int, ch CompChannelDriver) (CQDriver, error)
	// AsyncEvent blocks until an asynchronous event is available or ctx is done.
	AsyncEvent(ctx context.Context) (AsyncEvent, error)
	Close() error
}

// PDDriver is a protection domain.
type PDDriver interface {
	// RegMR registers buf; addr is the address of buf[0] as SGEs name it.
	RegMR(mr *MR, buf []byte, addr uint64, access AccessFlags) (MRDriver, error)
	CreateQP(qp *QP, attr *QPInitAttr) (QPDriver, error)
	CreateSRQ(srq *SRQ, attr *SRQInitAttr) (SRQDriver, error)
	CreateAH(ah *AH, attr *AHAttr) (AHDriver, error)
	Dealloc() error
}

// MRDriver is a registered memory region.
type MRDriver interface {
	LKey() uint32
	RKey() uint32
	Dereg() error
}

// CompChannelDriver is a completion event channel.
type CompChannelDriver interface {
	// GetEvent blocks until a CQ of the channel has an event or ctx is done.
	GetEvent(ctx context.Context) (*CQ, error)
	Fd() int
	Close() error
}

// CQDriver is a completion queue. Poll must not block or allocate.
type CQDriver interface {
	Poll(wc []WC) (int, error)
	ReqNotify(solicitedOnly bool) error
	Wait(ctx context.Context) error
	CQE() int
	Destroy() error
}

// QPDriver is a queue pair.
type QPDriver interface {
	Num() uint32
	PostSend(wr []SendWR) error
	PostRecv(wr []RecvWR) error
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query() (QPAttr, QPInitAttr, error)
	Destroy() error
}

// SRQDriver is a shared receive queue.
type SRQDriver interface {
	PostRecv(wr []RecvWR) error
	Modify(attr *SRQAttr, mask SRQAttrMask) error
	Query() (SRQAttr, error)
	Destroy() error
}

// AHDriver is an address handle.
type AHDriver interface {
	Destroy() error
}

var registry struct {
	sync.Mutex
	providers map[string]Provider
}

// RegisterProvider makes the devices of p visible to Devices and OpenDevice.
// Providers call it from their init function; registering a name twice
// replaces the earlier provider.
func RegisterProvider(name string, p Provider) {
	registry.Lock()
	defer registry.Unlock()
	if registry.providers == nil {
		registry.providers = make(map[string]Provider)
	}
	registry.providers[name] = p
}

func providers() []Provider {
	registry.Lock()
	defer registry.Unlock()
	names := make([]string, 0, len(registry.providers))
	for n := range registry.providers {
		names = append(names, n)
	}
	sort.Strings(names)
	ps := make([]Provider, len(names))
	for i, n := range names {
		ps[i] = registry.providers[n]
	}
	return ps
}
