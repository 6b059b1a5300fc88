package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// A connection nobody listens for is a rejection, as librdmacm reports
// it, and errors.Is sees its errno, ECONNREFUSED, on every transport (an
// abstract unix name nobody holds too; the transports' closed addresses
// are a closed TCP port, a unix path with no socket, a RoCE port).
func TestRefusedWrapsECONNREFUSED(t *testing.T) {
	leakcheck.Check(t)
	addrs := map[string]string{"unix-abstract": fmt.Sprintf("unix:@goverbs-rdmacm-nobody-%d", os.Getpid())}
	for _, tr := range transports {
		addrs[tr.name] = tr.closed(t)
	}
	src := map[string]string{"roce": transports[2].src}
	for name, addr := range addrs {
		_, err := rdmacm.DialFrom(timeout(t), src[name], addr, nil, nil)
		var rej *rdmacm.RejectedError
		if !errors.Is(err, rdmacm.ErrRejected) || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &rej) || !errors.Is(rej.Err, syscall.ECONNREFUSED) {
			t.Errorf("%s: Dial(%q): %v, want a rejection wrapping ECONNREFUSED", name, addr, err)
		}
		// A unix path with no socket is ENOENT too, as connect(2) says.
		if name == "unix" && !errors.Is(err, syscall.ENOENT) {
			t.Errorf("%s: Dial(%q): %v, want ENOENT too", name, addr, err)
		}
	}
}

// A unix: listener that does not admit this process (its peer check)
// refuses it with a rejection that wraps EACCES.
func TestPeerCheckRefusalWrapsEACCES(t *testing.T) {
	leakcheck.Check(t)
	ln, err := rdmacm.NewID(fmt.Sprintf("unix:@goverbs-rdmacm-eacces-%d", os.Getpid()),
		rdmacm.IDOptions{Unix: &shm.Config{AllowPeer: func(shm.PeerCred) bool { return false }}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ln.Listen(); err != nil {
		t.Fatal(err)
	}
	_, err = rdmacm.Dial(timeout(t), ln.LocalAddr().String(), nil, nil)
	var rej *rdmacm.RejectedError
	if !errors.Is(err, rdmacm.ErrRejected) || !errors.Is(err, syscall.EACCES) || !errors.As(err, &rej) || rej.PrivateData != nil {
		t.Fatalf("Dial: %v, want a rejection wrapping EACCES", err)
	}
}

// silentTCP is a TCP listener that accepts and never answers the MPA
// Request; silentUnix is its unix counterpart.
func silentTCP(t *testing.T) string { return silent(t, "tcp", "127.0.0.1:0") }

func silentUnix(t *testing.T) string {
	return "unix:" + silent(t, "unixpacket", fmt.Sprintf("@goverbs-rdmacm-silent-%d-%d", os.Getpid(), unixSeq.Add(1)))
}

func silent(t *testing.T, network, addr string) string {
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// When the caller's context ends, Dial's error wraps the context's error
// (and ErrUnreachable at a deadline), on every transport.
func TestDialContextEnds(t *testing.T) {
	leakcheck.Check(t)
	silentRoCE := fmt.Sprintf("roce://%v:7000", roceAddr(9)) // an address no process serves
	for name, addr := range map[string]string{"tcp": silentTCP(t), "unix": silentUnix(t), "roce": silentRoCE} {
		src := ""
		if name == "roce" {
			src = transports[2].src
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := rdmacm.DialFrom(ctx, src, addr, nil, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rdmacm.ErrUnreachable) {
			t.Errorf("%s: Dial with a 300 ms deadline: %v, want DeadlineExceeded and ErrUnreachable", name, err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err = rdmacm.DialFrom(ctx, src, addr, nil, nil)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Dial canceled: %v, want context.Canceled", name, err)
		}
	}
}

// Without a deadline, Dial gives up after the transport's limit (10 s by
// default: here set short) with ETIMEDOUT; a context deadline longer than
// the limit is the one that counts, as a shorter one is.
func TestDialLimitAndLongerDeadline(t *testing.T) {
	leakcheck.Check(t)
	for _, c := range []struct {
		name, addr string
		o          rdmacm.IDOptions
	}{
		{"tcp", silentTCP(t), rdmacm.IDOptions{TCP: &iwarp.Config{ConnectTimeout: 50 * time.Millisecond}}},
		{"unix", silentUnix(t), rdmacm.IDOptions{Unix: &shm.Config{DialTimeout: 50 * time.Millisecond}}},
		// A loopback address no device serves: nothing answers the REQs.
		{"roce", fmt.Sprintf("roce://%v:7000", roceAddr(40)),
			rdmacm.IDOptions{Source: transports[2].src, RoCE: &roce.Config{ConnectTimeout: 50 * time.Millisecond}}},
	} {
		dial := func(ctx context.Context) error {
			id, err := rdmacm.NewID(c.addr, c.o)
			if err != nil {
				t.Fatal(err)
			}
			defer id.Close()
			if err := id.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
				t.Fatal(err)
			}
			return id.Connect(ctx, nil)
		}
		err := dial(context.Background())
		if !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, rdmacm.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: no deadline: %v, want ETIMEDOUT and ErrUnreachable", c.name, err)
		}
		// The context's deadline, 10 times the limit, ends the wait: the
		// error is the context's, not the limit's.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err = dial(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("%s: a deadline longer than the limit: %v, want DeadlineExceeded", c.name, err)
		}
	}
}

// Every method of a closed identifier returns ErrClosed: a connected one,
// a listener, and one never connected; and the calls blocked in it when it
// is closed return ErrClosed too.
func TestClosedIdentifier(t *testing.T) { both(t, testClosedIdentifier) }

func testClosedIdentifier(t *testing.T, tr transport) {
	leakcheck.Check(t)
	ctx := timeout(t)
	c, s := pair(t, tr, nil, nil)
	buf := make([]byte, 64)
	mr, err := c.RegMsgs(buf)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	// Blocked calls: a receive completion and an event that never come.
	recv, sendc, event := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { _, err := s.GetRecvComp(ctx); recv <- err }()
	go func() { _, err := s.GetSendComp(ctx); sendc <- err }()
	go func() {
		for {
			ev, err := s.NextEvent(ctx)
			if err != nil || ev.Type != rdmacm.EventEstablished {
				event <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond) // let them block (a test of no timing: they return ErrClosed either way)
	s.Close()
	for what, ch := range map[string]chan error{"GetRecvComp": recv, "GetSendComp": sendc, "NextEvent": event} {
		if err := <-ch; !errors.Is(err, rdmacm.ErrClosed) {
			t.Errorf("%s blocked during Close: %v, want ErrClosed", what, err)
		}
	}
	c.Close()
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { _, err := ln.GetRequest(ctx); blocked <- err }()
	time.Sleep(20 * time.Millisecond)
	ln.Close()
	if err := <-blocked; !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("GetRequest blocked during Close: %v, want ErrClosed", err)
	}
	idle, err := rdmacm.CreateIDFrom(tr.src, tr.dial(ln))
	if err != nil {
		t.Fatal(err)
	}
	idle.Close()
	for _, id := range []*rdmacm.ID{c, s, ln, idle} {
		_, regErr := id.RegMsgs(buf)
		_, readErr := id.RegRead(buf)
		_, writeErr := id.RegWrite(buf)
		_, nextErr := id.NextEvent(ctx)
		_, reqErr := id.GetRequest(ctx)
		_, rcErr := id.GetRecvComp(ctx)
		_, scErr := id.GetSendComp(ctx)
		for what, err := range map[string]error{
			"RegMsgs": regErr, "RegRead": readErr, "RegWrite": writeErr,
			"NextEvent": nextErr, "GetRequest": reqErr, "GetRecvComp": rcErr, "GetSendComp": scErr,
			"CreateQP":    id.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}),
			"DestroyQP":   id.DestroyQP(),
			"Connect":     id.Connect(ctx, nil),
			"Listen":      id.Listen(),
			"Accept":      id.Accept(ctx, nil),
			"Reject":      id.Reject(nil),
			"Disconnect":  id.Disconnect(),
			"PostRecv":    id.PostRecv(1, buf, mr),
			"PostRecvv":   id.PostRecvv(1, []verbs.SGE{mr.SGE(0, 8)}),
			"PostSend":    id.PostSend(1, buf[:8], mr, verbs.SendSignaled),
			"PostSendv":   id.PostSendv(1, []verbs.SGE{mr.SGE(0, 8)}, 0),
			"PostRead":    id.PostRead(1, buf[:8], mr, 0, 0, 1),
			"PostReadv":   id.PostReadv(1, []verbs.SGE{mr.SGE(0, 8)}, 0, 0, 1),
			"PostWrite":   id.PostWrite(1, buf[:8], mr, 0, 0, 1),
			"PostWritev":  id.PostWritev(1, []verbs.SGE{mr.SGE(0, 8)}, 0, 0, 1),
			"PostUDSend":  id.PostUDSend(1, buf[:8], mr, 0, nil, 1),
			"Close again": closedAgain(id),
		} {
			if !errors.Is(err, rdmacm.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", what, err)
			}
		}
	}
}

// closedAgain is Close of a closed identifier, which does nothing: it
// returns ErrClosed when its Close says nil, so that the table above holds.
func closedAgain(id *rdmacm.ID) error {
	if err := id.Close(); err != nil {
		return err
	}
	return rdmacm.ErrClosed
}

// The address a listener prints is the one to dial: tcp, unix:@name,
// unix:/path and roce://; the client's RemoteAddr prints it too.
func TestAddressRoundTrip(t *testing.T) {
	leakcheck.Check(t)
	listens := map[string]string{
		"tcp":          "127.0.0.1:0",
		"unix-name":    fmt.Sprintf("unix:@goverbs-rdmacm-addr-%d", os.Getpid()),
		"unix-path":    "unix:" + filepath.Join(t.TempDir(), "sock"),
		"roce":         fmt.Sprintf("roce://%v:7100", roceAddr(1)),
		"tcp-explicit": "tcp://127.0.0.1:0",
	}
	for name, addr := range listens {
		t.Run(name, func(t *testing.T) {
			ctx := timeout(t)
			ln, err := rdmacm.Listen(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			printed := ln.LocalAddr().String()
			if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "roce:") {
				if printed != addr {
					t.Errorf("Listen(%q).LocalAddr() prints %q", addr, printed)
				}
			}
			go func() {
				req, err := ln.GetRequest(ctx)
				if err != nil {
					return
				}
				defer req.Close()
				if req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}) == nil {
					req.Accept(ctx, nil)
				}
				<-ctx.Done()
			}()
			src := ""
			if name == "roce" {
				src = transports[2].src
			}
			c, err := rdmacm.DialFrom(ctx, src, printed, nil, nil)
			if err != nil {
				t.Fatalf("Dial(%q), the listener's own address: %v", printed, err)
			}
			defer c.Close()
			if got := c.RemoteAddr().String(); got != printed {
				t.Errorf("the client's RemoteAddr prints %q, the listener's LocalAddr %q", got, printed)
			}
		})
	}
}

// Addresses Dial cannot use are refused with an error that says why.
func TestDialBadAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"unix:":      "empty",
		"roce://":    "empty",
		"tcp://":     "empty",
		"":           "empty",
		"@name":      "unix:@name",
		"/tmp/sock":  "unix:/tmp/sock",
		"quic://x:1": "no transport",
	} {
		_, err := rdmacm.Dial(timeout(t), addr, nil, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Dial(%q): %v, want an error that says %q", addr, err, want)
		}
		if !errors.Is(err, verbs.ErrInvalid) && !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("Dial(%q): %v, want ErrInvalid or ErrNotSupported", addr, err)
		}
	}
}
