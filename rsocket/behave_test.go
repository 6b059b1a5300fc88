package rsocket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// roceTest is a loopback address of this test process's own: port 4791 of
// an address belongs to one process, and other packages' tests (or a
// benchmark) may hold 127.0.0.1's.
var roceTest = fmt.Sprintf("roce://127.%d.%d.41:0", 100+os.Getpid()%100, os.Getpid()/100%250)

var transports = []string{"loop", "unix", "127.0.0.1:0", roceTest}

func pair(t *testing.T, tr string) (*Conn, *Conn) {
	t.Helper()
	a, b, _, err := makePipe(tr)()
	if err != nil {
		t.Fatal(err)
	}
	return a.(*Conn), b.(*Conn)
}

// A deadline set while a Read or a Write is blocked ends it.
func TestDeadlineMovedWhileBlocked(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := pair(t, tr)
			defer b.Close()
			defer a.Close()
			done := make(chan error, 1)
			go func() {
				_, err := a.Read(make([]byte, 10))
				done <- err
			}()
			time.Sleep(20 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("Read returned before any deadline: %v", err)
			default:
			}
			a.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read: %v, want ErrDeadlineExceeded", err)
			}
			// The connection still works after a timeout.
			a.SetReadDeadline(time.Time{})
			go b.Write([]byte("after"))
			buf := make([]byte, 5)
			if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "after" {
				t.Fatalf("read after timeout: %q %v", buf, err)
			}

			// Writes block once the peer's buffer and credits are used up.
			wdone := make(chan error, 1)
			go func() {
				chunk := make([]byte, 64<<10)
				for {
					if _, err := a.Write(chunk); err != nil {
						wdone <- err
						return
					}
				}
			}()
			time.Sleep(50 * time.Millisecond)
			select {
			case err := <-wdone:
				t.Fatalf("Write failed before any deadline: %v", err)
			default:
			}
			a.SetWriteDeadline(time.Now())
			if err := <-wdone; !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Write: %v, want ErrDeadlineExceeded", err)
			}
			var ne net.Error
			if err := a.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Write([]byte("x")); !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("Write after a past deadline: %v", err)
			}
		})
	}
}

// CloseWrite: the peer reads what was written, then io.EOF, and can still
// answer; writing after it is EPIPE.
func TestCloseWrite(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := pair(t, tr)
			defer b.Close()
			defer a.Close()
			msg := bytes.Repeat([]byte("half-close "), 50000)
			go func() {
				a.Write(msg)
				a.CloseWrite()
			}()
			got, err := io.ReadAll(b)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("ReadAll: %d bytes of %d, %v", len(got), len(msg), err)
			}
			if _, err := b.Write([]byte("reply")); err != nil {
				t.Fatal(err)
			}
			b.CloseWrite()
			got, err = io.ReadAll(a)
			if err != nil || string(got) != "reply" {
				t.Fatalf("reply: %q %v", got, err)
			}
			if _, err := a.Write([]byte("more")); !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("Write after CloseWrite: %v, want EPIPE", err)
			}
		})
	}
}

// A peer whose transport goes away without rsocket's disconnect (a
// process that dies) gives ECONNRESET, after the data it sent.
func TestPeerDies(t *testing.T) {
	for _, tr := range []string{"unix", "127.0.0.1:0", roceTest} {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := pair(t, tr)
			defer a.Close()
			defer b.Close()
			if _, err := b.Write([]byte("last words")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 10)
			if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "last words" {
				t.Fatalf("data before the failure: %q %v", buf, err)
			}
			// Tear b's identifier down under it, as its process exit would.
			b.closeFn()
			b.closeFn = nil
			a.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := a.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("Read: %v, want ECONNRESET", err)
			}
			if _, err := a.Write(buf); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("Write: %v, want ECONNRESET", err)
			}
		})
	}
}

// Close ends blocked calls with net.ErrClosed; a second Close is nil, as
// every second Close of goverbs.
func TestCloseUnblocks(t *testing.T) {
	leakcheck.Check(t)
	a, b := pair(t, "unix")
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked Read: %v, want net.ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
	if _, err := b.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer Read: %v, want EOF", err)
	}
}

// A connect request that does not carry rsocket's connection data is
// rejected, and the listener goes on.
func TestListenerRejectsStrangers(t *testing.T) {
	leakcheck.Check(t)
	addr := "unix:@rsocket-stranger-test"
	ln, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pd := range [][]byte{nil, []byte("hello"), make([]byte, 40)} {
		id, err := rdmacm.Dial(ctx, addr, nil, &rdmacm.ConnParam{PrivateData: pd})
		if err == nil {
			id.Close()
			t.Fatalf("a stranger with %q was accepted", pd)
		}
		if !errors.Is(err, rdmacm.ErrRejected) {
			t.Fatalf("stranger: %v, want a rejection", err)
		}
	}
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.Fatal("Accept failed")
	}
	c.Close()
	s.Close()
	ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// Dialing a listener that is not an rsocket one fails clearly.
func TestDialStranger(t *testing.T) {
	leakcheck.Check(t)
	addr := "unix:@rsocket-stranger-listener"
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.GetRequest(context.Background())
		if err != nil {
			return
		}
		req.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		req.Accept(context.Background(), &rdmacm.ConnParam{PrivateData: []byte("not rsocket")})
		time.Sleep(100 * time.Millisecond)
		req.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := Dial(ctx, addr); err == nil || !errors.Is(err, errConnData) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial: %v, want malformed connection data", err)
	}
}

// The data path does not allocate.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := pair(t, "loop")
	defer b.Close()
	defer a.Close()
	w, r := make([]byte, 64), make([]byte, 64)
	n := testing.AllocsPerRun(200, func() {
		a.Write(w)
		io.ReadFull(b, r)
	})
	if n != 0 {
		t.Fatalf("%v allocations per Write+Read", n)
	}
}

// Over iWARP a call blocked for nudgeAfter sends the peer one keepalive
// (Linux siw may hold a posted request until a frame arrives): the peer
// receives it as a message and ignores it, and the stream goes on. Other
// transports send none.
func TestBlockedCallNudgesIWARPPeer(t *testing.T) {
	for _, tr := range []string{"127.0.0.1:0", "unix"} {
		t.Run(tr, func(t *testing.T) {
			leakcheck.Check(t)
			a, b := pair(t, tr)
			defer b.Close()
			defer a.Close()
			// A round trip first: each side's first credit update goes
			// then.
			for _, d := range [][2]*Conn{{b, a}, {a, b}} {
				if _, err := d[0].Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(d[1], make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond)
			before, err := b.qp.Counters()
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			buf := make([]byte, 5)
			go func() {
				_, err := io.ReadFull(a, buf)
				done <- err
			}()
			time.Sleep(nudgeAfter + 150*time.Millisecond)
			after, err := b.qp.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Write([]byte("later")); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil || string(buf) != "later" {
				t.Fatalf("read %q, %v", buf, err)
			}
			want := uint64(0)
			if tr == "127.0.0.1:0" {
				want = 1
			}
			if got := after.Received.Msgs - before.Received.Msgs; got != want {
				t.Fatalf("peer received %d messages while a Read was blocked, want %d", got, want)
			}
		})
	}
}
