//go:build !linux

package rdmacm

// eventFD has no descriptor outside Linux: Fd returns -1.
type eventFD struct{}

func newEventFD() (eventFD, error) { return eventFD{}, nil }
func (eventFD) add()               {}
func (eventFD) take()              {}
func (eventFD) fd() int            { return -1 }
func (eventFD) close() error       { return nil }
