package rsocket

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

var pipeSeq atomic.Int64

// makePipe returns nettest's MakePipe over a listener at addr; "loop"
// means Pipe.
func makePipe(addr string) nettest.MakePipe {
	return func() (c1, c2 net.Conn, stop func(), err error) {
		if addr == "loop" {
			a, b, err := Pipe()
			if err != nil {
				return nil, nil, nil, err
			}
			return a, b, func() { a.Close(); b.Close() }, nil
		}
		la := addr
		if la == "unix" {
			la = fmt.Sprintf("unix:@rsocket-nettest-%d-%d", time.Now().UnixNano(), pipeSeq.Add(1))
		}
		ln, err := Listen(la)
		if err != nil {
			return nil, nil, nil, err
		}
		defer ln.Close()
		da := la
		if addr != "unix" {
			da = ln.Addr().String()
		}
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := ln.Accept()
			ch <- res{c, err}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c1, err = Dial(ctx, da)
		if err != nil {
			return nil, nil, nil, err
		}
		r := <-ch
		if r.err != nil {
			c1.Close()
			return nil, nil, nil, r.err
		}
		c2 = r.c
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	}
}

func TestNettest(t *testing.T) {
	for _, tr := range []string{"loop", "unix", "127.0.0.1:0", roceTest} {
		t.Run(tr, func(t *testing.T) { nettest.TestConn(t, makePipe(tr)) })
	}
}
