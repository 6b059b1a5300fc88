package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// EventChannel is a connection event channel (struct rdma_event_channel):
// one queue for the events of many identifiers, and a descriptor for
// epoll or poll (Fd) that is readable while an event is queued, so that one
// goroutine, or a program's own event loop, serves every connection.
//
// An identifier's events go to the channel once it is attached
// (NewEventChannel, then ID.Migrate; rdma_create_id's channel argument):
// its connection events, and, for a listening identifier, a connect
// request for each connection (EventConnectRequest, whose ID is the new
// identifier, attached to the same channel). An attached identifier's own
// NextEvent and GetRequest are not used (ErrInvalid).
type EventChannel struct {
	mu     sync.Mutex
	q      []Event
	wake   chan struct{} // capacity 1: a hint that q may be non-empty
	fd     eventFD
	ids    int // identifiers attached
	closed bool
	done   chan struct{}
}

// NewEventChannel creates an event channel (rdma_create_event_channel).
// It fails only when the descriptor cannot be made (EMFILE).
func NewEventChannel() (*EventChannel, error) {
	fd, err := newEventFD()
	if err != nil {
		return nil, err
	}
	return &EventChannel{wake: make(chan struct{}, 1), fd: fd, done: make(chan struct{})}, nil
}

// GetEvent returns the channel's next event (rdma_get_cm_event), waiting
// until there is one or ctx is done. It returns ErrClosed once the
// channel is closed. Events need no acknowledgement (rdma_ack_cm_event):
// an Event owns its data.
func (ch *EventChannel) GetEvent(ctx context.Context) (Event, error) {
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return Event{}, ErrClosed
		}
		if len(ch.q) > 0 {
			ev := ch.q[0]
			ch.q[0] = Event{}
			ch.q = ch.q[1:]
			ch.fd.take()
			more := len(ch.q) > 0
			ch.mu.Unlock()
			if more {
				ch.hint()
			}
			return ev, nil
		}
		ch.mu.Unlock()
		select {
		case <-ch.wake:
		case <-ch.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Fd returns a descriptor that is readable while the channel holds
// events (the fd of struct rdma_event_channel), for epoll or poll; read
// the events with GetEvent, not from the descriptor. It is -1 where the
// platform has no eventfd.
func (ch *EventChannel) Fd() int { return ch.fd.fd() }

// Close destroys the channel (rdma_destroy_event_channel). It returns
// ErrBusy while identifiers are attached (close them, or Migrate them
// away, first), and nil when closed already. A GetEvent blocked on it
// returns ErrClosed.
func (ch *EventChannel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return nil
	}
	if ch.ids > 0 {
		return fmt.Errorf("%w: %d identifiers use the event channel", errBusy, ch.ids)
	}
	ch.closed = true
	ch.q = nil
	close(ch.done)
	return ch.fd.close()
}

func (ch *EventChannel) hint() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// deliver queues ev (dropped once the channel is closed).
func (ch *EventChannel) deliver(ev Event) {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	ch.q = append(ch.q, ev)
	ch.fd.add()
	ch.mu.Unlock()
	ch.hint()
}

// attach counts an identifier on the channel; false once it is closed.
func (ch *EventChannel) attach() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return false
	}
	ch.ids++
	return true
}

func (ch *EventChannel) detach() {
	ch.mu.Lock()
	ch.ids--
	ch.mu.Unlock()
}

// errOnChannel is what NextEvent and GetRequest of an attached identifier return.
var errOnChannel = fmt.Errorf("%w: the identifier's events go to its EventChannel", errInvalid)

// Migrate moves the identifier's events to ch (rdma_migrate_id): the
// events queued on the identifier move too, in order, and the later ones
// go there. ch nil gives the identifier its own queue again
// (NextEvent). It returns ErrClosed for a closed identifier or channel.
func (id *ID) Migrate(ch *EventChannel) error {
	if ch != nil && !ch.attach() {
		return ErrClosed
	}
	id.mu.Lock()
	if id.state == stateClosed {
		id.mu.Unlock()
		if ch != nil {
			ch.detach()
		}
		return ErrClosed
	}
	old := id.ch
	id.ch = ch
	id.stopPump()
	// Move what is queued: to the new channel, or from the old one back
	// to the identifier's own queue.
	if ch != nil {
	drain:
		for {
			select {
			case ev := <-id.events:
				ch.deliver(ev)
			default:
				break drain
			}
		}
	}
	if old != nil && ch == nil {
		old.takeFor(id, id.postLocked)
	} else if old != nil {
		old.takeFor(id, ch.deliver)
	}
	if ch != nil && id.state == stateListening {
		id.startPump()
	}
	id.mu.Unlock()
	if old != nil {
		old.detach()
	}
	return nil
}

// takeFor hands the queued events of id to f, in order, and removes them.
func (ch *EventChannel) takeFor(id *ID, f func(Event)) {
	ch.mu.Lock()
	var mine []Event
	rest := ch.q[:0:0]
	for _, ev := range ch.q {
		if ev.ID == id || ev.Listen == id && ev.Type == EventConnectRequest {
			mine = append(mine, ev)
			ch.fd.take()
		} else {
			rest = append(rest, ev)
		}
	}
	ch.q = rest
	ch.mu.Unlock()
	for _, ev := range mine {
		f(ev)
	}
}

// startPump starts the goroutine that turns a listening identifier's
// connection requests into EventConnectRequest events on its channel;
// id.mu is held.
func (id *ID) startPump() {
	ctx, cancel := context.WithCancel(context.Background())
	id.pumpStop = cancel
	ch := id.ch
	id.wg.Add(1)
	go func() {
		defer id.wg.Done()
		for {
			req, err := id.getRequest(ctx)
			if err != nil {
				var ae *AcceptError
				if errors.As(err, &ae) {
					ch.deliver(Event{Type: EventConnectError, ID: id, Listen: id, Err: err})
					continue
				}
				return // closed, or migrated (ctx)
			}
			rd, ro := req.PeerResources()
			ev := Event{Type: EventConnectRequest, ID: req, Listen: id, PrivateData: req.PrivateData(), ResponderResources: rd, InitiatorDepth: ro}
			if !ch.attach() {
				req.Close()
				return
			}
			req.mu.Lock()
			req.ch = ch
			req.mu.Unlock()
			ch.deliver(ev)
		}
	}()
}

// stopPump stops startPump's goroutine, if any; id.mu is held (the
// goroutine does not take it: Close waits for it through id.wg).
func (id *ID) stopPump() {
	if id.pumpStop != nil {
		id.pumpStop()
		id.pumpStop = nil
	}
}
