//go:build rdmacore && linux && cgo

package rdmacore

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "gv.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Available reports whether the package was built with the rdmacore tag,
// that is whether it registers rdma-core's devices.
const Available = true

func init() { driver.Register("rdmacore", provider{}) }

type provider struct{}

// devList is rdma-core's device list, taken once: the ibv_device structs
// it points to stay valid while the list is not freed, and contexts keep
// pointing at them. Devices that appear later are not seen by this process.
var devList struct {
	once sync.Once
	devs []*device
	err  error
}

func (provider) Devices() []driver.Device {
	devList.once.Do(loadDevices)
	out := make([]driver.Device, len(devList.devs))
	for i, d := range devList.devs {
		out[i] = d
	}
	return out
}

func loadDevices() {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		// No uverbs support at all (no kernel module, a container without
		// /dev/infiniband): no devices, which is not an error for verbs.Devices.
		devList.err = err
		return
	}
	for _, dev := range unsafe.Slice(list, int(n)) {
		d := &device{dev: dev}
		d.name = C.GoString(C.ibv_get_device_name(dev))
		d.guid = bits.ReverseBytes64(uint64(C.ibv_get_device_guid(dev)))
		d.node = verbs.NodeType(dev.node_type)
		d.transport = verbs.TransportType(dev.transport_type)
		devList.devs = append(devList.devs, d)
	}
}

type device struct {
	dev       *C.struct_ibv_device
	name      string
	guid      uint64
	node      verbs.NodeType
	transport verbs.TransportType

	inlineOnce sync.Once
	inline     int
}

func (d *device) Name() string                       { return d.name }
func (d *device) GUID() uint64                       { return d.guid }
func (d *device) NodeType() verbs.NodeType           { return d.node }
func (d *device) TransportType() verbs.TransportType { return d.transport }

func (d *device) Open() (driver.Context, error) {
	c, err := C.ibv_open_device(d.dev)
	if c == nil {
		return nil, errnoErr("ibv_open_device "+d.name, errnoOf(err))
	}
	ctx := &devContext{c: c, dev: d}
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(c, &a); rc != 0 {
		C.ibv_close_device(c)
		return nil, errnoErr("ibv_query_device "+d.name, errnoOf(err))
	}
	ctx.attr = convDeviceAttr(&a, d)
	// FLUSH and ATOMIC_WRITE need the extended post API (ibv_wr_flush,
	// ibv_wr_atomic_write) and IBV_ACCESS_FLUSH_*, which this provider
	// does not use (Debian's rdma-core 44 has none of them): it reports
	// neither, whatever the device can do, so that rpma registers and
	// flushes as librpma does without them.
	ctx.attr.DeviceCapFlagsEx = verbs.DeviceCapFlagsEx(C.gv_cap_flags_ex(c, C.uint64_t(a.device_cap_flags))) &^
		(verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite)
	ctx.attr.MaxInlineData = d.maxInline(c)
	ctx.async, err = newFdWaiter(int(c.async_fd), d.name+" async events")
	if err != nil {
		C.ibv_close_device(c)
		return nil, err
	}

	return ctx, nil
}

// maxInline is the largest max_inline_data an RC QP of the device accepts,
// which struct ibv_device_attr does not report: found once per device by
// creating QPs (a binary search, about 17 of them).
func (d *device) maxInline(c *C.struct_ibv_context) int {
	d.inlineOnce.Do(func() {
		pd := C.ibv_alloc_pd(c)
		if pd == nil {
			return
		}
		defer C.ibv_dealloc_pd(pd)
		cq := C.gv_create_cq(c, 1, 0, nil)
		if cq == nil {
			return
		}
		defer C.ibv_destroy_cq(cq)
		try := func(n int) bool {
			var ia C.struct_ibv_qp_init_attr
			ia.send_cq, ia.recv_cq, ia.qp_type = cq, cq, C.IBV_QPT_RC
			ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge = 1, 1, 1, 1
			ia.cap.max_inline_data = C.uint32_t(n)
			qp := C.ibv_create_qp(pd, &ia)
			if qp == nil {
				return false
			}
			C.ibv_destroy_qp(qp)
			return true
		}
		lo, hi := 0, 1<<16 // lo works, hi+1 does not (beyond hi is not tried)
		if try(hi) {
			d.inline = hi
			return
		}
		hi--
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if try(mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		d.inline = lo
	})
	return d.inline
}

func convDeviceAttr(a *C.struct_ibv_device_attr, d *device) verbs.DeviceAttr {
	return verbs.DeviceAttr{
		FWVer:           C.GoString(&a.fw_ver[0]),
		NodeGUID:        bits.ReverseBytes64(uint64(a.node_guid)),
		SysImageGUID:    bits.ReverseBytes64(uint64(a.sys_image_guid)),
		MaxMRSize:       uint64(a.max_mr_size),
		PageSizeCap:     uint64(a.page_size_cap),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVer:           uint32(a.hw_ver),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		DeviceCapFlags:  uint32(a.device_cap_flags),
		MaxSGE:          int(a.max_sge),
		MaxSGERd:        int(a.max_sge_rd),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxResRdAtom:    int(a.max_res_rd_atom),
		AtomicCap:       verbs.AtomicCap(a.atomic_cap),
		MaxAH:           int(a.max_ah),
		MaxSRQ:          int(a.max_srq),
		MaxSRQWR:        int(a.max_srq_wr),
		MaxSRQSGE:       int(a.max_srq_sge),
		MaxPKeys:        int(a.max_pkeys),
		PhysPortCnt:     uint8(a.phys_port_cnt),
		NodeType:        d.node,
		TransportType:   d.transport,
	}
}

// handles maps the numbers goverbs stores in cq_context, qp_context and
// srq_context back to its objects, so that events name verbs objects; a
// number whose object is gone finds nothing instead of a stale pointer.
var handles struct {
	sync.Map
	next atomic.Uint64
}

func newHandle(v any) uint64 {
	h := handles.next.Add(1)
	handles.Store(h, v)
	return h
}

func lookup[T any](h uint64) T {
	v, _ := handles.Load(h)
	t, _ := v.(T)
	return t
}

// devContext is an opened device (struct ibv_context).
type devContext struct {
	c      *C.struct_ibv_context
	dev    *device
	attr   verbs.DeviceAttr
	async  *fdWaiter
	qps    sync.Map // QP number -> *queuePair, for iWARP state tracking
	closed atomic.Bool
}

func (c *devContext) QueryDevice() verbs.DeviceAttr { return c.attr }

func (c *devContext) QueryPort(port uint8) (verbs.PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc := C.gv_query_port(c.c, C.uint8_t(port), &a); rc != 0 {
		return verbs.PortAttr{}, errnoErr(fmt.Sprintf("ibv_query_port %s port %d", c.dev.name, port), errnoFromRC(rc))
	}
	return verbs.PortAttr{
		State:        verbs.PortState(a.state),
		MaxMTU:       verbs.MTU(a.max_mtu),
		ActiveMTU:    verbs.MTU(a.active_mtu),
		GIDTblLen:    int(a.gid_tbl_len),
		PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSz:     uint32(a.max_msg_sz),
		PKeyTblLen:   uint16(a.pkey_tbl_len),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		ActiveWidth:  uint8(a.active_width),
		ActiveSpeed:  uint8(a.active_speed),
		PhysState:    uint8(a.phys_state),
		LinkLayer:    verbs.LinkLayer(a.link_layer),
	}, nil
}

// errnoFromRC is the errno of a libibverbs call that returns it (or its
// negation) instead of setting errno.
func errnoFromRC(rc C.int) syscallErrno {
	if rc < 0 {
		rc = -rc
	}
	return syscallErrno(rc)
}

func (c *devContext) QueryGID(port uint8, index int) (verbs.GID, error) {
	var g C.union_ibv_gid
	if index < 0 {
		return verbs.GID{}, fmt.Errorf("%w: GID index %d", verbs.ErrInvalid, index)
	}
	if rc, err := C.ibv_query_gid(c.c, C.uint8_t(port), C.int(index), &g); rc != 0 {
		return verbs.GID{}, errnoErr(fmt.Sprintf("ibv_query_gid %s port %d index %d", c.dev.name, port, index), errnoOf(err))
	}
	return verbs.GID(g), nil
}

func (c *devContext) AllocPD(v *verbs.PD) (driver.PD, error) {
	pd, err := C.ibv_alloc_pd(c.c)
	if pd == nil {
		return nil, errnoErr("ibv_alloc_pd", errnoOf(err))
	}
	return &protDomain{pd: pd, ctx: c}, nil
}

// AsyncEvent returns the next asynchronous event, read from the device's
// descriptor (waited on in the netpoller). Reading an event also updates
// what goverbs keeps of its object: an iWARP QP's state, a CQ in error, an
// SRQ's disarmed limit.
func (c *devContext) AsyncEvent(ctx context.Context) (verbs.AsyncEvent, error) {
	return c.readEvent(ctx)
}

func (c *devContext) readEvent(ctx context.Context) (verbs.AsyncEvent, error) {
	var ev verbs.AsyncEvent
	err := c.async.wait(ctx, func() (bool, error) {
		var a C.struct_gv_async
		rc := C.gv_get_async_event(c.c, &a)
		if rc == C.EAGAIN || rc == C.EWOULDBLOCK {
			return false, nil
		}
		if rc != 0 {
			return true, errnoErr("ibv_get_async_event", syscallErrno(rc))
		}
		ev = verbs.AsyncEvent{Type: verbs.EventType(a._type), PortNum: uint8(a.port)}
		switch o := lookupAny(uint64(a.handle)).(type) {
		case *queuePair:
			ev.QP = o.v
			switch ev.Type {
			case verbs.EventQPFatal, verbs.EventQPReqErr, verbs.EventQPAccessErr:
				o.state.Store(uint32(verbs.QPSErr))
			}
		case *complQueue:
			ev.CQ = o.v
			if ev.Type == verbs.EventCQErr {
				o.overflowed.Store(true)
			}
		case *sharedRQ:
			ev.SRQ = o.v
			if ev.Type == verbs.EventSRQLimitReached {
				o.limitFired()
			}
		}
		return true, nil
	})
	return ev, err
}

func lookupAny(h uint64) any {
	if h == 0 {
		return nil
	}
	v, _ := handles.Load(h)
	return v
}

func (c *devContext) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.async.close()
	if rc := C.ibv_close_device(c.c); rc != 0 {
		return errnoErr("ibv_close_device", errnoFromRC(rc))
	}
	return nil
}

// protDomain is a protection domain (struct ibv_pd).
type protDomain struct {
	pd   *C.struct_ibv_pd
	ctx  *devContext
	mu   sync.Mutex
	dead bool
}

// hold locks p for a creation on it, unless it was deallocated.
func (p *protDomain) hold() error {
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return fmt.Errorf("%w: PD deallocated", verbs.ErrClosed)
	}
	return nil
}

func (p *protDomain) Dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return fmt.Errorf("%w: PD deallocated", verbs.ErrClosed)
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoErr("ibv_dealloc_pd", errnoFromRC(rc))
	}
	p.dead = true
	return nil
}

// memRegion is a registered memory region (struct ibv_mr). Go memory is
// pinned for the region's lifetime: the device holds its address, and cgo's
// rules let C keep a Go pointer only while it is pinned.
type memRegion struct {
	mr  *C.struct_ibv_mr
	pin runtime.Pinner
}

// liveMRs holds every region until Dereg: a region dropped without Dereg
// stays registered (as in C) instead of its Pinner being collected while
// pinned, which the runtime treats as a fatal error.
var liveMRs sync.Map

func (p *protDomain) RegMR(v *verbs.MR, buf []byte, addr uint64, access verbs.AccessFlags) (driver.MR, error) {
	if err := p.hold(); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	if access&(verbs.AccessFlushGlobal|verbs.AccessFlushPersistent) != 0 {
		return nil, fmt.Errorf("%w: FLUSH access: the rdma-core this was built with has no IBV_ACCESS_FLUSH_*", verbs.ErrNotSupported)
	}
	m := &memRegion{}
	if verbs.BufferOf(buf) == nil {
		// Go memory: pinned so that C may hold its address (the Go
		// collector does not move heap objects, the pin makes that a rule).
		m.pin.Pin(&buf[0])
	}
	mr, err := C.gv_reg_mr(p.pd, C.uint64_t(addr), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		m.pin.Unpin()
		return nil, memlockErr(len(buf), errnoOf(err))
	}
	m.mr = mr
	liveMRs.Store(m, struct{}{})
	return m, nil
}

func (m *memRegion) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *memRegion) RKey() uint32 { return uint32(m.mr.rkey) }

func (m *memRegion) Dereg() error {
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return errnoErr("ibv_dereg_mr", errnoFromRC(rc))
	}
	m.pin.Unpin()
	liveMRs.Delete(m)
	return nil
}

// addrHandle is an address handle (struct ibv_ah).
type addrHandle struct {
	ah   *C.struct_ibv_ah
	ptr  C.uint64_t
	dead atomic.Bool
}

func (p *protDomain) CreateAH(v *verbs.AH, attr *verbs.AHAttr) (driver.AH, error) {
	if err := p.hold(); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	var a C.struct_ibv_ah_attr
	fillAH(&a, attr)
	ah, err := C.ibv_create_ah(p.pd, &a)
	if ah == nil {
		return nil, errnoErr("ibv_create_ah", errnoOf(err))
	}
	return &addrHandle{ah: ah, ptr: C.gv_ptr(unsafe.Pointer(ah))}, nil
}

func (h *addrHandle) Destroy() error {
	if h.dead.Swap(true) {
		return fmt.Errorf("%w: AH destroyed", verbs.ErrClosed)
	}
	if rc := C.ibv_destroy_ah(h.ah); rc != 0 {
		return errnoErr("ibv_destroy_ah", errnoFromRC(rc))
	}
	return nil
}

func fillAH(a *C.struct_ibv_ah_attr, v *verbs.AHAttr) {
	a.dlid = C.uint16_t(v.DLID)
	a.sl = C.uint8_t(v.SL)
	a.src_path_bits = C.uint8_t(v.SrcPathBits)
	a.static_rate = C.uint8_t(v.StaticRate)
	a.port_num = C.uint8_t(v.PortNum)
	if v.IsGlobal {
		a.is_global = 1
		a.grh.dgid = C.union_ibv_gid(v.GRH.DGID)
		a.grh.flow_label = C.uint32_t(v.GRH.FlowLabel)
		a.grh.sgid_index = C.uint8_t(v.GRH.SGIDIndex)
		a.grh.hop_limit = C.uint8_t(v.GRH.HopLimit)
		a.grh.traffic_class = C.uint8_t(v.GRH.TrafficClass)
	}
}

func convAH(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	v := verbs.AHAttr{
		DLID: uint16(a.dlid), SL: uint8(a.sl), SrcPathBits: uint8(a.src_path_bits),
		StaticRate: uint8(a.static_rate), PortNum: uint8(a.port_num), IsGlobal: a.is_global != 0,
	}
	if v.IsGlobal {
		v.GRH = verbs.GlobalRoute{
			DGID: verbs.GID(a.grh.dgid), FlowLabel: uint32(a.grh.flow_label), SGIDIndex: uint8(a.grh.sgid_index),
			HopLimit: uint8(a.grh.hop_limit), TrafficClass: uint8(a.grh.traffic_class),
		}
	}
	return v
}

// wcLayout returns struct ibv_wc's field offsets and size, for the test
// that checks verbs.WC has the same layout (Poll fills it directly).
func wcLayout() [14]uintptr {
	var o [14]C.size_t
	C.gv_wc_layout(&o[0])
	var r [14]uintptr
	for i := range o {
		r[i] = uintptr(o[i])
	}
	return r
}

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

// addrOf is the address of b's first byte, for an SGE that names memory
// kept in place (pinned) for as long as the device may read it.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// DeviceNames lists the names of the devices rdma-core found.
func DeviceNames() []string {
	devList.once.Do(loadDevices)
	names := make([]string, len(devList.devs))
	for i, d := range devList.devs {
		names[i] = d.name
	}
	return names
}

// goWCLayout returns verbs.WC's field offsets and size, in wcLayout's order.
func goWCLayout() [14]uintptr {
	var w verbs.WC
	return [14]uintptr{
		unsafe.Offsetof(w.WRID), unsafe.Offsetof(w.Status), unsafe.Offsetof(w.Opcode), unsafe.Offsetof(w.VendorErr),
		unsafe.Offsetof(w.ByteLen), unsafe.Offsetof(w.ImmData), unsafe.Offsetof(w.QPNum), unsafe.Offsetof(w.SrcQP),
		unsafe.Offsetof(w.Flags), unsafe.Offsetof(w.PKeyIndex), unsafe.Offsetof(w.SLID), unsafe.Offsetof(w.SL),
		unsafe.Offsetof(w.DLIDPathBits), unsafe.Sizeof(w),
	}
}
