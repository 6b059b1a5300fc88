package roce

import "fmt"

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
