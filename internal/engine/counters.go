package engine

import "github.com/goverbs/goverbs/verbs"

// Counters, as a NIC keeps them: plain counts under the locks that the
// completions they count are made under (q.mu for the send side, q.rqMu
// for the receive side), so counting costs a few adds per request.

// TransportCounters is implemented by transports that retransmit.
type TransportCounters interface {
	// Counters returns the packets sent again and the RNR NAKs received.
	Counters() (retransmits, rnrNaks uint64)
}

// countSend counts a retired send request; q.mu is held.
func (q *QP) countSend(w *WQE) {
	if w.status == verbs.WCSuccess {
		c := &q.cnt.Sent[w.WR.Opcode&15]
		c.Msgs++
		c.Bytes += uint64(w.Len)
		return
	}
	q.cnt.SendErrors[w.status&31]++
}

// countRecv counts a receive completion; q.rqMu is held.
func (q *QP) countRecv(st verbs.WCStatus, n uint32) {
	if st == verbs.WCSuccess {
		q.rcnt.Msgs++
		q.rcnt.Bytes += uint64(n)
		return
	}
	q.rcnt.RecvErrors[st&31]++
}

// recvCounts are the receive side's counters.
type recvCounts struct {
	verbs.OpCount
	RecvErrors [32]uint64
}

// Counters returns the QP's counters.
func (q *QP) Counters() verbs.QPCounters {
	q.mu.Lock()
	c := q.cnt
	t := q.t
	q.rqMu.Lock()
	c.Received, c.RecvErrors = q.rcnt.OpCount, q.rcnt.RecvErrors
	q.rqMu.Unlock()
	q.mu.Unlock()
	if tc, ok := t.(TransportCounters); ok {
		c.Retransmits, c.RNRNaks = tc.Counters()
	}
	return c
}

// gone adds a destroyed QP's counters to the device's.
func (d *Device) gone(q *QP, c *verbs.QPCounters) {
	d.cntMu.Lock()
	d.goneCnt.Add(c)
	q.inGone = true
	d.cntMu.Unlock()
}

// Counters implements the device counters of package verbs: every QP the
// device had, live or destroyed, and its CQ overflows.
func (c *Context) Counters() verbs.DeviceCounters {
	d := c.dev
	d.qpmu.RLock()
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.qpmu.RUnlock()
	var out verbs.DeviceCounters
	live := make([]verbs.QPCounters, len(qps))
	for i, q := range qps { // not under qpmu: Destroy takes q.mu, then qpmu
		live[i] = q.Counters()
	}
	d.cntMu.Lock()
	for i, q := range qps {
		if !q.inGone { // else in goneCnt already
			out.Add(&live[i])
		}
	}
	out.Add(&d.goneCnt)
	out.QPs = d.qpOrd
	d.cntMu.Unlock()
	out.CQOverflows = d.overflows.Load()
	return out
}
