package verbs

import "fmt"

type qpCounting = interface{ Counters() QPCounters }

type deviceCounting = interface{ Counters() DeviceCounters }

// Counters returns what the QP did so far (ErrNotSupported when its
// provider keeps no counters).
func (q *QP) Counters() (QPCounters, error) {
	if c, ok := q.d.(qpCounting); ok {
		return c.Counters(), nil
	}
	return QPCounters{}, fmt.Errorf("%w: the provider keeps no QP counters", ErrNotSupported)
}

// Counters returns what the context's device did in this process so far
// (ErrNotSupported when its provider keeps no counters).
func (c *Context) Counters() (DeviceCounters, error) {
	if d, ok := c.d.(deviceCounting); ok {
		return d.Counters(), nil
	}
	return DeviceCounters{}, fmt.Errorf("%w: the provider keeps no device counters", ErrNotSupported)
}
