package verbs

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Device is an RDMA device offered by a registered provider (struct ibv_device).
type Device struct {
	d deviceDriver
}

// Devices lists the devices of every registered provider (ibv_get_device_list).
func Devices() []*Device {
	var out []*Device
	for _, p := range providers() {
		for _, d := range p.Devices() {
			out = append(out, &Device{d: d})
		}
	}
	return out
}

// OpenDevice opens the device called name, or the first device when name is
// empty. It returns ErrNoDevice when there is none.
func OpenDevice(name string) (*Context, error) {
	for _, d := range Devices() {
		if name == "" || d.Name() == name {
			return d.Open()
		}
	}
	if name == "" {
		return nil, fmt.Errorf("%w: no RDMA device registered", ErrNoDevice)
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

// Name returns the device's name, e.g. "loop0".
func (d *Device) Name() string { return d.d.Name() }

// GUID returns the node GUID.
func (d *Device) GUID() uint64 { return d.d.GUID() }

// NodeType returns the kind of node (channel adapter, RNIC, ...).
func (d *Device) NodeType() NodeType { return d.d.NodeType() }

// TransportType returns the transport (InfiniBand, iWARP, ...).
func (d *Device) TransportType() TransportType { return d.d.TransportType() }

// Open opens a context on the device (ibv_open_device).
func (d *Device) Open() (*Context, error) {
	cd, err := d.d.Open()
	if err != nil {
		return nil, err
	}
	return &Context{d: cd, dev: d}, nil
}

// Context is an opened device (struct ibv_context): the parent of every other object.
type Context struct {
	d      contextDriver
	dev    *Device
	closed atomic.Bool
}

// Device returns the device the context was opened on.
func (c *Context) Device() *Device { return c.dev }

// QueryDevice returns the device's attributes and limits (ibv_query_device).
func (c *Context) QueryDevice() DeviceAttr { return c.d.QueryDevice() }

// QueryPort returns the attributes of a port, numbered from 1 (ibv_query_port).
func (c *Context) QueryPort(port uint8) (PortAttr, error) { return c.d.QueryPort(port) }

// QueryGID returns entry index of a port's GID table (ibv_query_gid).
func (c *Context) QueryGID(port uint8, index int) (GID, error) { return c.d.QueryGID(port, index) }

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	pd := &PD{ctx: c}
	d, err := c.d.AllocPD(pd)
	if err != nil {
		return nil, err
	}
	pd.d = d
	return pd, nil
}

// CreateCompChannel creates a completion event channel (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	ch := &CompChannel{ctx: c}
	d, err := c.d.CreateCompChannel(ch)
	if err != nil {
		return nil, err
	}
	ch.d = d
	return ch, nil
}

// CreateCQ creates a completion queue with room for at least cqe completions
// (ibv_create_cq). With a non-nil channel, ReqNotify arms events on it.
// It returns ErrInvalid when cqe is below 1 or above the device's MaxCQE.
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if cqe < 1 {
		return nil, fmt.Errorf("%w: cqe %d", ErrInvalid, cqe)
	}
	if ch != nil && ch.ctx != c {
		return nil, fmt.Errorf("%w: completion channel of another context", ErrInvalid)
	}
	cq := &CQ{ctx: c, ch: ch}
	cq.spin.SetMax(DefaultWaitSpin)
	var chd compChannelDriver
	if ch != nil {
		chd = ch.d
	}
	d, err := c.d.CreateCQ(cq, cqe, chd)
	if err != nil {
		return nil, err
	}
	cq.d = d
	return cq, nil
}

// GetAsyncEvent blocks until an asynchronous event (a QP or CQ error, an SRQ
// limit, ...) is available, or ctx is done (ibv_get_async_event). Events need
// no acknowledgement in goverbs.
func (c *Context) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	return c.d.AsyncEvent(ctx)
}

// Close closes the context (ibv_close_device).
func (c *Context) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.d.Close()
}
