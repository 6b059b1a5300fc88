package rdmacm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// readable reports whether fd polls readable within d.
func readable(t *testing.T, fd int, d time.Duration) bool {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(d/time.Millisecond))
	if err != nil && !errors.Is(err, unix.EINTR) {
		t.Fatalf("poll: %v", err)
	}
	return n == 1 && pfd[0].Revents&unix.POLLIN != 0
}

// TestEventChannelServesManyIDs: one channel carries the events of a
// listener and of every identifier its requests make
// (rdma_create_event_channel(3), rdma_get_cm_event(3)): a connect request
// per dialer, then each accepted connection's ESTABLISHED, then its
// DISCONNECTED; its descriptor polls readable exactly while events are
// queued.
func TestEventChannelServesManyIDs(t *testing.T) {
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			leakcheck.Check(t)
			ctx := timeout(t)
			ch, err := rdmacm.NewEventChannel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			if readable(t, ch.Fd(), 0) {
				t.Fatal("an empty channel's descriptor is readable")
			}
			ln, err := rdmacm.CreateID(tr.listen())
			if err != nil {
				t.Fatal(err)
			}
			if err := ln.Migrate(ch); err != nil {
				t.Fatal(err)
			}
			if err := ln.Listen(); err != nil {
				t.Fatal(err)
			}
			if _, err := ln.GetRequest(ctx); !errors.Is(err, verbs.ErrInvalid) {
				t.Fatalf("GetRequest of a listener on a channel: %v, want ErrInvalid", err)
			}
			const n = 3
			dialed := make(chan *rdmacm.ID, n)
			errs := make(chan error, n)
			for range n {
				go func() {
					id, err := rdmacm.Dial(ctx, tr.dial(ln), nil, nil)
					if err != nil {
						errs <- err
						return
					}
					dialed <- id
				}()
			}
			if !readable(t, ch.Fd(), 10*time.Second) {
				t.Fatal("the descriptor is not readable with a request queued")
			}
			// Requests and establishments interleave: each request is
			// accepted as it comes.
			reqs, est := map[*rdmacm.ID]bool{}, map[*rdmacm.ID]bool{}
			for len(reqs) < n || len(est) < n {
				ev, err := ch.GetEvent(ctx)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case ev.Type == rdmacm.EventEstablished && reqs[ev.ID] && !est[ev.ID]:
					est[ev.ID] = true
					continue
				case ev.Type != rdmacm.EventConnectRequest || ev.Listen != ln || ev.ID == ln || reqs[ev.ID]:
					t.Fatalf("event %v (listen %p, id %p), want a new connect request of %p or an accepted one's ESTABLISHED", ev, ev.Listen, ev.ID, ln)
				}
				if _, err := ev.ID.NextEvent(ctx); !errors.Is(err, verbs.ErrInvalid) {
					t.Fatalf("NextEvent of a request on a channel: %v, want ErrInvalid", err)
				}
				if err := ev.ID.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
					t.Fatal(err)
				}
				if err := ev.ID.Accept(ctx, nil); err != nil {
					t.Fatal(err)
				}
				reqs[ev.ID] = true
			}
			clients := make([]*rdmacm.ID, 0, n)
			for range n {
				select {
				case id := <-dialed:
					clients = append(clients, id)
				case err := <-errs:
					t.Fatal(err)
				}
			}
			if readable(t, ch.Fd(), 0) {
				t.Fatal("the descriptor is readable with no event queued")
			}
			if err := ch.Close(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Close of a channel in use: %v, want ErrBusy", err)
			}
			for _, c := range clients {
				c.Close()
			}
			for range n {
				ev, err := ch.GetEvent(ctx)
				if err != nil || ev.Type != rdmacm.EventDisconnected || !reqs[ev.ID] {
					t.Fatalf("event %v, %v: want DISCONNECTED of an accepted request", ev, err)
				}
			}
			for id := range reqs {
				id.Close()
			}
			ln.Close()
			if err := ch.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := ch.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := ch.GetEvent(ctx); !errors.Is(err, rdmacm.ErrClosed) {
				t.Fatalf("GetEvent after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestMigrateMovesQueuedEvents: rdma_migrate_id(3): the events an
// identifier has queued move with it, in order, and later ones follow;
// migrating back to no channel gives NextEvent back its events; GetEvent
// ends with the caller's context.
func TestMigrateMovesQueuedEvents(t *testing.T) {
	leakcheck.Check(t)
	tr := transports[0]
	ctx := timeout(t)
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			req.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			req.Accept(ctx, nil)
			<-ctx.Done()
			req.Close()
		}
	}()
	id, err := rdmacm.Dial(ctx, tr.dial(ln), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	// ESTABLISHED is queued on the identifier; move it.
	ch1, _ := rdmacm.NewEventChannel()
	ch2, _ := rdmacm.NewEventChannel()
	defer ch1.Close()
	defer ch2.Close()
	if err := id.Migrate(ch1); err != nil {
		t.Fatal(err)
	}
	if err := id.Migrate(ch2); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := ch1.GetEvent(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetEvent of the channel migrated from: %v, want the context's deadline", err)
	}
	cancel()
	if ev, err := ch2.GetEvent(ctx); err != nil || ev.Type != rdmacm.EventEstablished || ev.ID != id {
		t.Fatalf("event %v, %v: want the ESTABLISHED queued before the migration", ev, err)
	}
	if err := id.Migrate(nil); err != nil {
		t.Fatal(err)
	}
	if err := ch2.Close(); err != nil {
		t.Fatalf("Close of a channel no identifier uses: %v", err)
	}
	if err := id.Migrate(ch2); !errors.Is(err, rdmacm.ErrClosed) {
		t.Fatalf("Migrate to a closed channel: %v, want ErrClosed", err)
	}
	if err := id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if ev, err := id.NextEvent(ctx); err != nil || ev.Type != rdmacm.EventDisconnected {
		t.Fatalf("event %v, %v: want DISCONNECTED on the identifier's own queue", ev, err)
	}
}

// TestDialFromOverTCP: a source address (rdma_resolve_addr's src_addr)
// is the TCP connection's local address over iWARP, as it picks the
// device over RoCE: the listener sees the connection come from it. A
// source that is no IP address is ErrInvalid; unix: takes none.
func TestDialFromOverTCP(t *testing.T) {
	leakcheck.Check(t)
	ctx := timeout(t)
	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- req.RemoteAddr().String()
		req.Close()
	}()
	// 127.0.0.3 is local on Linux (all of 127/8 is), and not the
	// address the route to 127.0.0.1 would pick.
	id, err := rdmacm.CreateIDFrom("127.0.0.3", ln.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	if err := id.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	go id.Connect(ctx, nil) // rejected when the request is closed
	if from := <-got; len(from) < 10 || from[:10] != "127.0.0.3:" {
		t.Fatalf("the listener saw the connection come from %q, want 127.0.0.3", from)
	}
	if _, err := rdmacm.CreateIDFrom("localhost", ln.LocalAddr().String()); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("a source that is no IP address: %v, want ErrInvalid", err)
	}
	if _, err := rdmacm.CreateIDFrom("127.0.0.1", "unix:@nobody-here"); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("a source over unix: %v, want ErrNotSupported", err)
	}
}
