//go:build rdmacore && linux && cgo

package rdmacore

/*
#include "gv.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// compChannel is a completion channel (struct ibv_comp_channel), waited on
// through the netpoller.
type compChannel struct {
	ch *C.struct_ibv_comp_channel
	w  *fdWaiter
	// mu is read-held while ch is used and write-held by Close, which
	// frees it.
	mu     sync.RWMutex
	closed bool
}

func (c *devContext) CreateCompChannel(v *verbs.CompChannel) (driver.CompChannel, error) {
	ch, err := C.ibv_create_comp_channel(c.c)
	if ch == nil {
		return nil, errnoErr("ibv_create_comp_channel", errnoOf(err))
	}
	w, err := newFdWaiter(int(ch.fd), c.dev.name+" completion channel")
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	return &compChannel{ch: ch, w: w}, nil
}

// next takes one event off the channel: the CQ's handle, or 0 when there is none.
func (ch *compChannel) next() (uint64, error) {
	ch.mu.RLock()
	defer ch.mu.RUnlock()
	if ch.closed {
		return 0, errChanClosed
	}
	h, err := C.gv_get_cq_event(ch.ch)
	if h != 0 {
		return uint64(h), nil
	}
	e := errnoOf(err)
	if e == C.EAGAIN {
		return 0, nil
	}
	return 0, errnoErr("ibv_get_cq_event", e)
}

func (ch *compChannel) GetEvent(ctx context.Context) (*verbs.CQ, error) {
	for {
		var h uint64
		err := ch.w.wait(ctx, func() (bool, error) {
			var err error
			h, err = ch.next()
			return h != 0 || err != nil, err
		})
		if err != nil {
			return nil, err
		}
		// An event of a CQ destroyed meanwhile names nothing: skip it.
		if cq := lookup[*complQueue](h); cq != nil {
			return cq.v, nil
		}
	}
}

func (ch *compChannel) Fd() int { return int(ch.ch.fd) }

// Close destroys the channel; it fails with ErrBusy while a CQ uses it
// (ibv_destroy_comp_channel's EBUSY) and leaves it working.
func (ch *compChannel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return fmt.Errorf("%w: completion channel already closed", verbs.ErrClosed)
	}
	if rc := C.ibv_destroy_comp_channel(ch.ch); rc != 0 {
		return errnoErr("ibv_destroy_comp_channel", errnoFromRC(rc))
	}
	ch.closed = true
	ch.w.close()
	return nil
}

// complQueue is a completion queue (struct ibv_cq).
//
// Poll is one ibv_poll_cq straight into the caller's []verbs.WC, whose
// layout is struct ibv_wc's (a test checks it). Wait needs no channel from
// the user: a CQ created without one gets a private channel, and Wait arms
// it and parks on its descriptor in the netpoller. Since a CQ cannot be
// told apart from empty without taking a completion, Wait keeps the
// completion it found in stash, and Poll returns it first.
type complQueue struct {
	v      *verbs.CQ
	ctx    *devContext
	iwarp  bool
	cq     *C.struct_ibv_cq
	ptr    C.uint64_t
	handle uint64
	cqe    int
	user   *compChannel // the user's channel, or nil
	priv   *compChannel // the private channel when user is nil

	// life is read-held by every call that touches cq, and write-held by
	// Destroy, so that no call reaches a destroyed CQ (ErrClosed instead).
	life sync.RWMutex
	dead bool

	// overflowed is set when the device reported the CQ in error
	// (EventCQErr): an empty Poll then says ErrCQOverflow.
	overflowed atomic.Bool

	stashed atomic.Bool
	mu      sync.Mutex // guards stash
	stash   verbs.WC
}

var errCQClosed = fmt.Errorf("%w: CQ destroyed", verbs.ErrClosed)

func (c *devContext) CreateCQ(v *verbs.CQ, cqe int, ch driver.CompChannel) (driver.CQ, error) {
	if max := c.attr.MaxCQE; max > 0 && cqe > max {
		return nil, fmt.Errorf("%w: cqe %d above the device's max_cqe %d", verbs.ErrInvalid, cqe, max)
	}
	q := &complQueue{v: v, ctx: c, iwarp: c.dev.transport == verbs.TransportIWARP}
	if ch != nil {
		uc, ok := ch.(*compChannel)
		if !ok {
			return nil, fmt.Errorf("%w: completion channel of another provider", verbs.ErrInvalid)
		}
		q.user = uc
	} else {
		pc, err := c.CreateCompChannel(nil)
		if err != nil {
			return nil, err
		}
		q.priv = pc.(*compChannel)
	}
	bind := q.user
	if bind == nil {
		bind = q.priv
	}
	q.handle = newHandle(q)
	cq, err := C.gv_create_cq(c.c, C.int(cqe), C.uint64_t(q.handle), bind.ch)
	if cq == nil {
		handles.Delete(q.handle)
		if q.priv != nil {
			q.priv.Close()
		}
		return nil, errnoErr(fmt.Sprintf("ibv_create_cq of %d entries", cqe), errnoOf(err))
	}
	q.cq, q.ptr, q.cqe = cq, C.gv_ptr(unsafe.Pointer(cq)), int(cq.cqe)
	return q, nil
}

func (q *complQueue) CQE() int { return q.cqe }

func (q *complQueue) Poll(wc []verbs.WC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	q.life.RLock()
	defer q.life.RUnlock()
	if q.dead {
		return 0, errCQClosed
	}
	k := 0
	if q.stashed.Load() {
		q.mu.Lock()
		if q.stashed.Load() {
			wc[0] = q.stash
			q.stashed.Store(false)
			k = 1
		}
		q.mu.Unlock()
		if k == len(wc) {
			return k, nil
		}
	}
	n := C.gv_poll(q.ptr, C.int(len(wc)-k), (*C.struct_ibv_wc)(unsafe.Pointer(&wc[k])))
	if n < 0 {
		if k > 0 {
			return k, nil
		}
		return 0, fmt.Errorf("%w: ibv_poll_cq failed (%d)", verbs.ErrCQOverflow, int(n))
	}
	q.fixWC(wc[k : k+int(n)])
	if k+int(n) == 0 && q.overflowed.Load() {
		return 0, fmt.Errorf("%w: the device reported the CQ in error", verbs.ErrCQOverflow)
	}
	return k + int(n), nil
}

// fixWC converts what struct ibv_wc holds in network order: the immediate
// value (goverbs gives it as a plain number). On an iWARP device, whose
// QPs' state goverbs keeps itself, an unsuccessful completion marks its QP
// in ERR, as it is by then.
func (q *complQueue) fixWC(wc []verbs.WC) {
	for i := range wc {
		if wc[i].Flags&verbs.WCFlagWithImm != 0 {
			wc[i].ImmData = bits.ReverseBytes32(wc[i].ImmData)
		}
		if wc[i].Status != verbs.WCSuccess && q.iwarp {
			if qp, _ := q.ctx.qps.Load(wc[i].QPNum); qp != nil {
				qp.(*queuePair).state.Store(uint32(verbs.QPSErr))
			}
		}
	}
}

func (q *complQueue) ReqNotify(solicitedOnly bool) error {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.dead {
		return errCQClosed
	}
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	if rc := C.gv_req_notify(q.ptr, s); rc != 0 {
		return errnoErr("ibv_req_notify_cq", errnoFromRC(rc))
	}
	return nil
}

// takeOne polls one completion into the stash; it reports whether the CQ
// has one for Poll.
func (q *complQueue) takeOne() (bool, error) {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.dead {
		return false, errCQClosed
	}
	if q.stashed.Load() {
		return true, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stashed.Load() {
		return true, nil
	}
	n := C.gv_poll(q.ptr, 1, (*C.struct_ibv_wc)(unsafe.Pointer(&q.stash)))
	if n < 0 {
		return false, fmt.Errorf("%w: ibv_poll_cq failed (%d)", verbs.ErrCQOverflow, int(n))
	}
	if n == 1 {
		q.fixWC(unsafe.Slice(&q.stash, 1))
		q.stashed.Store(true)
		return true, nil
	}
	return false, nil
}

func (q *complQueue) Wait(ctx context.Context) error {
	if q.priv == nil {
		return q.waitPolling(ctx)
	}
	for {
		if ok, err := q.takeOne(); ok || err != nil {
			return err
		}
		if err := q.ReqNotify(false); err != nil {
			return err
		}
		// A completion that came before the arming raises no event.
		if ok, err := q.takeOne(); ok || err != nil {
			return err
		}
		err := q.priv.w.wait(ctx, func() (bool, error) {
			h, err := q.priv.next()
			return h != 0 || err != nil, err
		})
		if err != nil {
			return err
		}
	}
}

// waitPolling is Wait on a CQ bound to the user's channel, whose events are
// the user's: it polls, backing off to a millisecond between looks.
func (q *complQueue) waitPolling(ctx context.Context) error {
	d := time.Microsecond
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if ok, err := q.takeOne(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if d < time.Millisecond {
			d *= 2
		}
		t.Reset(d)
	}
}

func (q *complQueue) Destroy() error {
	q.life.Lock()
	defer q.life.Unlock()
	if q.dead {
		return errCQClosed
	}
	if rc := C.ibv_destroy_cq(q.cq); rc != 0 {
		return errnoErr("ibv_destroy_cq", errnoFromRC(rc))
	}
	q.dead = true
	handles.Delete(q.handle)
	if q.priv != nil {
		return q.priv.Close()
	}
	return nil
}
