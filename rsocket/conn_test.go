package rsocket

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestPipeBasic(t *testing.T) {
	a, b, err := Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	msg := bytes.Repeat([]byte("0123456789abcdef"), 100000)
	go func() {
		a.Write(msg)
		a.Close()
	}()
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("got %d bytes, want %d", len(got), len(msg))
	}
}

func testTransport(t *testing.T, addr string) (net.Conn, net.Conn) {
	ln, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	da := ln.Addr().String()
	if strings.HasPrefix(addr, "unix:") {
		da = addr
	}
	c, err := Dial(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	s := <-ch
	if s == nil {
		t.FailNow()
	}
	return c, s
}

func TestTransports(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "unix:@rsocket-test-basic"} {
		t.Run(addr, func(t *testing.T) {
			a, b := testTransport(t, addr)
			t.Logf("%v -> %v / %v -> %v", a.LocalAddr(), a.RemoteAddr(), b.LocalAddr(), b.RemoteAddr())
			defer b.Close()
			msg := bytes.Repeat([]byte("0123456789abcdef"), 100000)
			go func() {
				a.Write(msg)
				a.Close()
			}()
			got, err := io.ReadAll(b)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("got %d bytes, want %d", len(got), len(msg))
			}
		})
	}
}
