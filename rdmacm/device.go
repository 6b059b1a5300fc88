package rdmacm

import (
	"sync"

	"github.com/goverbs/goverbs/verbs"
)

// devices caches one context and one default PD per device, as librdmacm does.
var devices struct {
	sync.Mutex
	ctx map[string]*verbs.Context
	pd  map[string]*verbs.PD
}

func deviceContext(name string) (*verbs.Context, *verbs.PD, error) {
	devices.Lock()
	defer devices.Unlock()
	if c, ok := devices.ctx[name]; ok {
		return c, devices.pd[name], nil
	}
	c, err := verbs.OpenDevice(name)
	if err != nil {
		return nil, nil, err
	}
	pd, err := c.AllocPD()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if devices.ctx == nil {
		devices.ctx, devices.pd = map[string]*verbs.Context{}, map[string]*verbs.PD{}
	}
	devices.ctx[name], devices.pd[name] = c, pd
	return c, pd, nil
}

// DeviceContext returns the verbs context rdmacm uses for the device that
// serves addr, and its default protection domain, so that memory can be
// registered before an identifier exists.
func DeviceContext(addr string) (*verbs.Context, *verbs.PD, error) {
	t, rest, err := transportFor(addr)
	if err != nil {
		return nil, nil, err
	}
	name, err := deviceName(t, rest)
	if err != nil {
		return nil, nil, err
	}
	return deviceContext(name)
}
