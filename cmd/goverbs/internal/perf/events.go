package perf

// Event mode (Config.Events, perftest's -e): the measuring loops block for
// completions the C way instead of busy-polling, through the public verbs
// API only, as perftest does with -e (linux-rdma/perftest: send_lat.c and
// friends arm each CQ with ibv_req_notify_cq once before the run;
// ctx_notify_events in perftest_resources.h takes one event with
// ibv_get_cq_event, acknowledges it with ibv_ack_cq_events(cq, 1) and
// re-arms that CQ; the loops call it before polling when a poll found
// nothing). Both roles do it, each by its own flag.
//
// Every CQ of a side's data QPs reports to one completion channel, so that
// a loop that waits on several CQs (a bandwidth run over several QPs, a
// receiver that also sends credits) blocks in one GetEvent. Each CQ is
// armed when it is made and re-armed right after each of its events, so
// at any time it is either armed or has an event queued: a completion that
// lands after a poll that found nothing always ends the next GetEvent, and
// an event left over from a completion a poll already took costs one more
// turn of the loop, never a lost wake-up (ibv_get_cq_event(3)).
//
// With its CQs armed, a pure-Go provider's connection progresses by itself
// (its automatic mode): the passive side of a one-sided test arms and
// waits for the client to leave instead of polling.

import (
	"context"
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

// events is one side's event mode: its channel and the CQs it made. A nil
// *events is polled mode, and its methods busy-poll.
type events struct {
	vc  *verbs.Context
	ch  *verbs.CompChannel
	cqs []*verbs.CQ
	// taken counts the events taken (Result.Events).
	taken int64
}

// newEvents returns the event mode of a side of c, or nil in polled mode.
func newEvents(c *Config) *events {
	if !c.Events {
		return nil
	}
	return &events{}
}

// attach makes the send and receive CQs of a QP about to be created with
// attr on the device context vc, armed and reporting to the side's
// channel, and sets them in attr. In polled mode it leaves attr alone
// (rdmacm makes the CQs).
func (e *events) attach(vc *verbs.Context, attr *verbs.QPInitAttr) error {
	if e == nil {
		return nil
	}
	if vc == nil {
		return fmt.Errorf("perf: event mode: the connection has no device yet")
	}
	if e.ch == nil {
		ch, err := vc.CreateCompChannel()
		if err != nil {
			return err
		}
		e.vc, e.ch = vc, ch
	} else if e.vc != vc {
		return fmt.Errorf("perf: event mode: the QPs of one run are on two device contexts")
	}
	var cq [2]*verbs.CQ
	for i, n := range []int{attr.Cap.MaxSendWR, attr.Cap.MaxRecvWR} {
		c, err := vc.CreateCQ(max(n, 1), e.ch)
		if err != nil {
			return err
		}
		e.cqs = append(e.cqs, c)
		if err := c.ReqNotify(false); err != nil {
			return err
		}
		cq[i] = c
	}
	attr.SendCQ, attr.RecvCQ = cq[0], cq[1]
	return nil
}

// close destroys the CQs and the channel; the QPs that used them must be
// gone (their identifiers closed) first.
func (e *events) close() {
	if e == nil {
		return
	}
	for _, cq := range e.cqs {
		cq.Destroy()
	}
	if e.ch != nil {
		e.ch.Close()
	}
	e.cqs, e.ch = nil, nil
}

// block waits for the next event of any of the side's CQs, acknowledges it
// and re-arms that CQ (perftest's ctx_notify_events).
func (e *events) block(ctx context.Context) error {
	cq, err := e.ch.GetEvent(ctx)
	if err != nil {
		return err
	}
	e.taken++
	e.ch.AckEvents(cq, 1)
	return cq.ReqNotify(false)
}

// one waits for one completion of cq and leaves it in wc[0]: it busy-polls
// in polled mode, and blocks between polls in event mode.
func (e *events) one(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) error {
	if e == nil {
		return spin(ctx, cq, wc)
	}
	for {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return wc[0].Err()
		}
		if err := e.block(ctx); err != nil {
			return err
		}
	}
}

// count is the number of events taken (0 in polled mode).
func (e *events) count() int64 {
	if e == nil {
		return 0
	}
	return e.taken
}

// spin busy-polls cq for one completion. The context is looked at every
// 4096 empty polls, not at the first: its Err takes a lock (a signal
// context's, a cancel context's), which a ping-pong paid on every message.
func spin(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) error {
	for i := 1; ; i++ {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return wc[0].Err()
		}
		if i&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
