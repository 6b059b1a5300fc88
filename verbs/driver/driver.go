// Package driver is the interface between package verbs and the providers
// that implement it, in the way libibverbs' verbs_context_ops connect the
// library to a driver (and database/sql/driver serves database/sql).
// Applications do not use it.
//
// A provider implements these interfaces and calls Register from its init
// function. Package verbs checks the arguments of every call before it
// reaches a provider (nil attributes, objects of another context, negative
// capabilities, the access-flag rules of ibv_reg_mr), so a provider checks
// only what depends on the device. goverbs' pure-Go providers implement
// them once, in the shared software engine.
//
// Each interface is an alias of an interface literal: package verbs holds
// the same method sets under names of its own, and identical interface
// literals are one type, so a provider's objects pass between the two
// packages with no conversion or wrapper on the data path.
package driver

import (
	"context"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/internal/registry"
)

// Provider is a source of devices.
type Provider = interface {
	// Devices lists the provider's devices now.
	Devices() []Device
}

// Device is one device of a provider (struct ibv_device).
type Device = interface {
	Name() string
	GUID() uint64
	NodeType() verbs.NodeType
	TransportType() verbs.TransportType
	// Open returns a new context on the device.
	Open() (Context, error)
}

// Context is an opened device (struct ibv_context).
type Context = interface {
	QueryDevice() verbs.DeviceAttr
	QueryPort(port uint8) (verbs.PortAttr, error)
	QueryGID(port uint8, index int) (verbs.GID, error)
	AllocPD(pd *verbs.PD) (PD, error)
	CreateCompChannel(ch *verbs.CompChannel) (CompChannel, error)
	// CreateCQ creates a CQ with at least cqe entries; ch may be nil.
	CreateCQ(cq *verbs.CQ, cqe int, ch CompChannel) (CQ, error)
	// AsyncEvent blocks until an asynchronous event is available or ctx is done.
	AsyncEvent(ctx context.Context) (verbs.AsyncEvent, error)
	Close() error
}

// PD is a protection domain.
type PD = interface {
	// RegMR registers buf; addr is the address of buf[0] as SGEs name it.
	RegMR(mr *verbs.MR, buf []byte, addr uint64, access verbs.AccessFlags) (MR, error)
	CreateQP(qp *verbs.QP, attr *verbs.QPInitAttr) (QP, error)
	CreateSRQ(srq *verbs.SRQ, attr *verbs.SRQInitAttr) (SRQ, error)
	CreateAH(ah *verbs.AH, attr *verbs.AHAttr) (AH, error)
	Dealloc() error
}

// MR is a registered memory region.
type MR = interface {
	LKey() uint32
	RKey() uint32
	Dereg() error
}

// MWAllocator is a PD that has memory windows (optional: verbs returns
// ErrNotSupported from PD.AllocMW without it).
type MWAllocator = interface {
	AllocMW(mw *verbs.MW, typ verbs.MWType) (MW, error)
}

// MW is a memory window. RKey is the key of the last bind posted for it
// (or its first key).
type MW = interface {
	RKey() uint32
	Dealloc() error
}

// MRRereger is an MR that can be re-registered (optional; MR.Rereg).
// Rereg gets the region's whole new description, the unchanged parts
// included, and returns the region's new object (with new keys), which
// replaces the old one: the old one is not deregistered.
type MRRereger = interface {
	Rereg(pd PD, buf []byte, addr uint64, access verbs.AccessFlags) (MR, error)
}

// CQResizer is a CQ that can be resized (optional; CQ.Resize).
type CQResizer = interface {
	Resize(cqe int) error
}

// CompChannel is a completion event channel.
type CompChannel = interface {
	// GetEvent blocks until a CQ of the channel has an event or ctx is done.
	GetEvent(ctx context.Context) (*verbs.CQ, error)
	Fd() int
	Close() error
}

// CQ is a completion queue. Poll must not block or allocate.
type CQ = interface {
	Poll(wc []verbs.WC) (int, error)
	ReqNotify(solicitedOnly bool) error
	Wait(ctx context.Context) error
	CQE() int
	Destroy() error
}

// QP is a queue pair.
type QP = interface {
	Num() uint32
	PostSend(wr []verbs.SendWR) error
	PostRecv(wr []verbs.RecvWR) error
	Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error
	Query() (verbs.QPAttr, verbs.QPInitAttr, error)
	Destroy() error
}

// SRQ is a shared receive queue.
type SRQ = interface {
	PostRecv(wr []verbs.RecvWR) error
	Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error
	Query() (verbs.SRQAttr, error)
	Destroy() error
}

// AH is an address handle.
type AH = interface {
	Destroy() error
}

// Register makes the devices of p visible to verbs.Devices and
// verbs.OpenDevice. Providers call it from their init function; registering
// a name twice replaces the earlier provider.
func Register(name string, p Provider) { registry.Register(name, p) }

// The provider's object behind a verbs object, for a provider that is
// handed one: a CQ or SRQ in a QPInitAttr, an AH in a SendWR, a QP in a
// provider's own connect call (loop.Connect), an MR and an MW in a
// window's bind.

// QPOf returns the provider's object behind qp (nil for nil).
func QPOf(qp *verbs.QP) QP { return of[QP](qp) }

// CQOf returns the provider's object behind cq (nil for nil).
func CQOf(cq *verbs.CQ) CQ { return of[CQ](cq) }

// SRQOf returns the provider's object behind srq (nil for nil).
func SRQOf(srq *verbs.SRQ) SRQ { return of[SRQ](srq) }

// AHOf returns the provider's object behind ah (nil for nil).
func AHOf(ah *verbs.AH) AH { return of[AH](ah) }

// MROf returns the provider's object behind mr (nil for nil).
func MROf(mr *verbs.MR) MR { return of[MR](mr) }

// MWOf returns the provider's object behind mw (nil for nil).
func MWOf(mw *verbs.MW) MW { return of[MW](mw) }

func of[T any](obj any) T {
	d, _ := registry.Unwrap(obj).(T)
	return d
}
