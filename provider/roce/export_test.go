package roce

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/hook"
)

// SendStateOf describes the requester state of QP qpn of device name, for
// a test's failure message.
func SendStateOf(name string, qpn uint32) string {
	d := deviceNamed(name)
	if d == nil {
		return "no device"
	}
	d.qmu.RLock()
	q := d.qps[qpn]
	d.qmu.RUnlock()
	if q == nil {
		return "no QP"
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := &q.s
	str := fmt.Sprintf("una %#x nxt %#x high %#x npsn %#x n %d tx %d rnrWait %v timerOn %v due %v retries %d started %v",
		s.una, s.nxt, s.high, s.npsn, s.n, s.tx, s.rnrWait, s.timerOn, !s.due.IsZero(), s.retries, s.started)
	for i := range s.n {
		e := s.at(i)
		str += fmt.Sprintf("\n  unit %d: kind %d first %#x assigned %v psns %d npkt %d sent %d got %d", i, e.kind, e.first, e.assigned, e.psns, e.npkt, e.sent, e.got)
	}
	return str
}

// The wire faults of the loss tests (hook.RoCEWire, which package faults
// sets in programs).
type FaultKind = hook.WireFault

const (
	FaultPass = hook.WirePass
	FaultDrop = hook.WireDrop
	FaultDup  = hook.WireDup
	FaultHold = hook.WireHold
)

// SetWireFaults sets f as the wire's fault decision and returns a function
// that restores the previous one.
func SetWireFaults(f func(pkt []byte) FaultKind) (restore func()) {
	old := hook.RoCEWire.Set(f, f == nil)
	return func() { hook.RoCEWire.Set(old, old == nil) }
}

// FirstACKEvery is firstACKEvery.
const FirstACKEvery = firstACKEvery
