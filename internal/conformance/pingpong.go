package conformance

import (
	"sync"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// PingPong runs n 8-byte SEND/RECV round trips from x to an echo goroutine
// on y, both busy-polling their CQs (polled mode: the poll loops read the
// sockets). When rtt is not nil it receives each round trip's duration.
func PingPong(x, y *Side, n int, rtt []time.Duration) error {
	// The echo side's first receive is posted before anything is sent:
	// on iWARP (no RNR) a send that finds no receive is fatal.
	yrecv := []verbs.RecvWR{{SGList: []verbs.SGE{y.MR.SGE(0, 8)}}}
	if err := y.QP.PostRecv(yrecv); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var echoErr error
	go func() {
		defer wg.Done()
		send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{y.MR.SGE(64, 8)}}}
		wc := make([]verbs.WC, 1)
		for range n {
			if echoErr = Spin(y.RecvCQ, wc); echoErr != nil {
				return
			}
			y.QP.PostRecv(yrecv)
			y.QP.PostSend(send)
		}
	}()
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{x.MR.SGE(64, 8)}}}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{x.MR.SGE(0, 8)}}}
	wc := make([]verbs.WC, 1)
	x.QP.PostRecv(recv)
	var err error
	for i := range n {
		t0 := time.Now()
		x.QP.PostSend(send)
		if err = Spin(x.RecvCQ, wc); err != nil {
			break
		}
		if rtt != nil {
			rtt[i] = time.Since(t0)
		}
		x.QP.PostRecv(recv)
	}
	if err != nil {
		x.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState) // release the echo side
	}
	wg.Wait()
	if err == nil {
		err = echoErr
	}
	return err
}

// Spin busy-polls cq until one completion arrives (polled mode: the poll
// loop itself drives the provider) and returns its error status, if any.
func Spin(cq *verbs.CQ, wc []verbs.WC) error {
	for {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return wc[0].Err()
		}
	}
}
