package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Config describes a device to NewDevice.
type Config struct {
	Name      string
	GUID      uint64
	NodeType  verbs.NodeType
	Transport verbs.TransportType
	Attr      verbs.DeviceAttr // limits enforced by the engine
	Port      verbs.PortAttr   // the single port
	GID       verbs.GID        // GID index 0 of the port
	// NewTransport returns the transport of a new QP, for a device whose
	// QPs the application connects with Modify (loop). Nil for a device
	// whose QPs a connection manager connects (Endpoint.Establish).
	NewTransport func(e Endpoint) Transport
	// CMOnly is the error an application's Modify to RTR, or to RTS from
	// INIT or RTR, returns on a device without NewTransport: its QPs are
	// connected by the connection manager, not by Modify.
	CMOnly error
	// OwnCapture says the transport records its real packets for package
	// capture (roce): the engine synthesizes none for the device.
	OwnCapture bool
}

// Device is a software device. Its region table and QP numbers are shared by
// every context opened on it, as on a real adapter.
type Device struct {
	cfg   Config
	mrs   mrTable
	qpmu  sync.RWMutex
	qps   map[uint32]*QP
	qpn   uint32
	qpOrd uint64

	cntMu     sync.Mutex
	goneCnt   verbs.QPCounters // of destroyed QPs
	overflows atomic.Uint64    // CQs that overflowed
}

// NewDevice creates a device.
func NewDevice(cfg Config) *Device {
	d := &Device{cfg: cfg, qps: make(map[uint32]*QP)}
	d.cfg.Attr.NodeGUID = cfg.GUID
	d.cfg.Attr.SysImageGUID = cfg.GUID
	d.cfg.Attr.NodeType = cfg.NodeType
	d.cfg.Attr.TransportType = cfg.Transport
	d.cfg.Attr.PhysPortCnt = 1
	d.qpn = (randUint32() % 0xFF0000) + 0x100 // QP numbers start at a random point, as on hardware
	d.mrs.init()
	return d
}

func randUint32() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return binary.LittleEndian.Uint32(b[:])
}

// Name implements driver.Device.
func (d *Device) Name() string { return d.cfg.Name }

// GUID implements driver.Device.
func (d *Device) GUID() uint64 { return d.cfg.GUID }

// NodeType implements driver.Device.
func (d *Device) NodeType() verbs.NodeType { return d.cfg.NodeType }

// TransportType implements driver.Device.
func (d *Device) TransportType() verbs.TransportType { return d.cfg.Transport }

// Attr returns the device attributes.
func (d *Device) Attr() verbs.DeviceAttr { return d.cfg.Attr }

// Port returns the attributes of the device's port.
func (d *Device) Port() verbs.PortAttr { return d.cfg.Port }

// GIDOf returns the port's GID.
func (d *Device) GIDOf() verbs.GID { return d.cfg.GID }

// LookupQP returns the live QP with number n, for a transport that reaches
// its peers by number (loop).
func (d *Device) LookupQP(n uint32) (Endpoint, bool) {
	d.qpmu.RLock()
	q := d.qps[n]
	d.qpmu.RUnlock()
	return Endpoint{q}, q != nil
}

func (d *Device) addQP(q *QP) error {
	d.qpmu.Lock()
	defer d.qpmu.Unlock()
	if len(d.qps) >= d.cfg.Attr.MaxQP {
		return fmt.Errorf("%w: device limit of %d QPs", verbs.ErrNoMemory, d.cfg.Attr.MaxQP)
	}
	for {
		d.qpn = (d.qpn + 1) & 0xFFFFFF
		if d.qpn < 2 { // 0 and 1 are the special QPs
			continue
		}
		if _, used := d.qps[d.qpn]; !used {
			break
		}
	}
	q.num = d.qpn
	d.qpOrd++
	q.ord = d.qpOrd
	d.qps[q.num] = q
	return nil
}

func (d *Device) removeQP(q *QP) {
	d.qpmu.Lock()
	delete(d.qps, q.num)
	d.qpmu.Unlock()
}

// Open implements driver.Device.
func (d *Device) Open() (driver.Context, error) {
	return &Context{dev: d, evwake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// Context is an opened device.
type Context struct {
	dev    *Device
	evmu   sync.Mutex
	events []verbs.AsyncEvent
	lost   int
	evwake chan struct{}
	closed atomic.Bool
	done   chan struct{}
	pds    atomic.Int32
	cqs    atomic.Int32
}

// Device returns the context's device.
func (c *Context) Device() *Device { return c.dev }

const maxQueuedEvents = 4096

// raise queues an asynchronous event.
func (c *Context) raise(ev verbs.AsyncEvent) {
	c.evmu.Lock()
	if len(c.events) >= maxQueuedEvents {
		// Keep the oldest events (they are the causes); count the rest.
		c.lost++
	} else {
		c.events = append(c.events, ev)
	}
	c.evmu.Unlock()
	select {
	case c.evwake <- struct{}{}:
	default:
	}
}

// AsyncEvent implements driver.Context.
func (c *Context) AsyncEvent(ctx context.Context) (verbs.AsyncEvent, error) {
	for {
		c.evmu.Lock()
		if len(c.events) > 0 {
			ev := c.events[0]
			copy(c.events, c.events[1:])
			c.events = c.events[:len(c.events)-1]
			more := len(c.events) > 0
			c.evmu.Unlock()
			if more {
				select {
				case c.evwake <- struct{}{}:
				default:
				}
			}
			return ev, nil
		}
		c.evmu.Unlock()
		if c.closed.Load() {
			return verbs.AsyncEvent{}, verbs.ErrClosed
		}
		select {
		case <-c.evwake:
		case <-c.done:
		case <-ctx.Done():
			return verbs.AsyncEvent{}, ctx.Err()
		}
	}
}

// QueryDevice implements driver.Context.
func (c *Context) QueryDevice() verbs.DeviceAttr { return c.dev.cfg.Attr }

// QueryPort implements driver.Context.
func (c *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("%w: port %d (the device has port 1)", verbs.ErrInvalid, port)
	}
	return c.dev.cfg.Port, nil
}

// QueryGID implements driver.Context.
func (c *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 || index < 0 || index >= c.dev.cfg.Port.GIDTblLen {
		return verbs.GID{}, fmt.Errorf("%w: port %d GID index %d", verbs.ErrInvalid, port, index)
	}
	if index > 0 {
		return verbs.GID{}, nil
	}
	return c.dev.cfg.GID, nil
}

// AllocPD implements driver.Context.
func (c *Context) AllocPD(v *verbs.PD) (driver.PD, error) {
	if int(c.pds.Load()) >= c.dev.cfg.Attr.MaxPD {
		return nil, fmt.Errorf("%w: device limit of %d PDs", verbs.ErrNoMemory, c.dev.cfg.Attr.MaxPD)
	}
	c.pds.Add(1)
	return &PD{v: v, ctx: c}, nil
}

// CreateCompChannel implements driver.Context.
func (c *Context) CreateCompChannel(v *verbs.CompChannel) (driver.CompChannel, error) {
	return newCompChannel(c)
}

// CreateCQ implements driver.Context.
func (c *Context) CreateCQ(v *verbs.CQ, cqe int, ch driver.CompChannel) (driver.CQ, error) {
	if cqe > c.dev.cfg.Attr.MaxCQE {
		return nil, fmt.Errorf("%w: cqe %d exceeds the device's %d", verbs.ErrInvalid, cqe, c.dev.cfg.Attr.MaxCQE)
	}
	if int(c.cqs.Load()) >= c.dev.cfg.Attr.MaxCQ {
		return nil, fmt.Errorf("%w: device limit of %d CQs", verbs.ErrNoMemory, c.dev.cfg.Attr.MaxCQ)
	}
	var ech *CompChannel
	if ch != nil {
		var ok bool
		if ech, ok = ch.(*CompChannel); !ok {
			return nil, fmt.Errorf("%w: completion channel of another provider", verbs.ErrInvalid)
		}
		ech.refs.Add(1)
	}
	c.cqs.Add(1)
	cq := newCQ(c, v, cqe, ech)
	if ech != nil {
		ech.addCQ(cq)
	}
	return cq, nil
}

// Close implements driver.Context.
func (c *Context) Close() error {
	if !c.closed.Swap(true) {
		close(c.done)
	}
	return nil
}

// PD is a protection domain.
type PD struct {
	v    *verbs.PD
	ctx  *Context
	refs atomic.Int32 // MRs, QPs, SRQs and AHs
	dead atomic.Bool
}

// Dealloc implements driver.PD.
func (pd *PD) Dealloc() error {
	if n := pd.refs.Load(); n > 0 {
		return fmt.Errorf("%w: PD still has %d objects", verbs.ErrBusy, n)
	}
	if pd.dead.Swap(true) {
		return verbs.ErrClosed
	}
	pd.ctx.pds.Add(-1)
	return nil
}

// errPDGone is the error of a deallocated PD's use.
var errPDGone = fmt.Errorf("%w: protection domain deallocated", verbs.ErrClosed)

// RegMR implements driver.PD.
func (pd *PD) RegMR(v *verbs.MR, buf []byte, addr uint64, access verbs.AccessFlags) (driver.MR, error) {
	if pd.dead.Load() {
		return nil, errPDGone
	}
	if uint64(len(buf)) > pd.ctx.dev.cfg.Attr.MaxMRSize {
		return nil, fmt.Errorf("%w: region of %d bytes exceeds the device's %d", verbs.ErrInvalid, len(buf), pd.ctx.dev.cfg.Attr.MaxMRSize)
	}
	for _, f := range [...]struct {
		a verbs.AccessFlags
		c verbs.DeviceCapFlagsEx
	}{{verbs.AccessFlushGlobal, verbs.DeviceFlushGlobal}, {verbs.AccessFlushPersistent, verbs.DeviceFlushPersistent}} {
		if access&f.a != 0 && pd.ctx.dev.cfg.Attr.DeviceCapFlagsEx&f.c == 0 {
			return nil, fmt.Errorf("%w: access %v: the device has no %s", verbs.ErrNotSupported, f.a, capName(f.c))
		}
	}
	mr := &MR{v: v, pd: pd, buf: buf, addr: addr, access: access}
	if err := pd.ctx.dev.mrs.add(mr, pd.ctx.dev.cfg.Attr.MaxMR); err != nil {
		return nil, err
	}
	pd.refs.Add(1)
	return mr, nil
}

// flushCap is the device capability a FLUSH of type t needs.
func flushCap(t verbs.FlushType) verbs.DeviceCapFlagsEx {
	if t == verbs.FlushPersistent {
		return verbs.DeviceFlushPersistent
	}
	return verbs.DeviceFlushGlobal
}

// capName names a FLUSH capability for an error.
func capName(c verbs.DeviceCapFlagsEx) string {
	if c == verbs.DeviceFlushPersistent {
		return "FLUSH_PERSISTENT (IB_UVERBS_DEVICE_FLUSH_PERSISTENT)"
	}
	return "FLUSH_GLOBAL (IB_UVERBS_DEVICE_FLUSH_GLOBAL)"
}

// CreateAH implements driver.PD.
func (pd *PD) CreateAH(v *verbs.AH, attr *verbs.AHAttr) (driver.AH, error) {
	if pd.dead.Load() {
		return nil, errPDGone
	}
	if attr.PortNum != 1 {
		return nil, fmt.Errorf("%w: AH port %d", verbs.ErrInvalid, attr.PortNum)
	}
	pd.refs.Add(1)
	return &AH{pd: pd, Attr: *attr}, nil
}

// AH is an address handle.
type AH struct {
	pd   *PD
	Attr verbs.AHAttr
	dead atomic.Bool
}

// Destroy implements driver.AH.
func (ah *AH) Destroy() error {
	if ah.dead.Swap(true) {
		return verbs.ErrClosed
	}
	ah.pd.refs.Add(-1)
	return nil
}

// ahOf returns the engine's address handle behind v.
func ahOf(v *verbs.AH) (*AH, bool) {
	a, ok := driver.AHOf(v).(*AH)
	return a, ok
}
