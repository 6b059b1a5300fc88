package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// A server and a client over iWARP on loopback TCP: the server accepts
// with private data, the client sends a message, the server's blocking
// GetRecvComp returns it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	attr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}

	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := ln.GetRequest(ctx)
		if err != nil {
			panic(err)
		}
		defer req.Close()
		fmt.Printf("server: request with %q\n", req.PrivateData())
		req.CreateQP(nil, *attr)
		buf := make([]byte, 64)
		mr, _ := req.RegMsgs(buf)
		defer mr.Dereg()
		req.PostRecv(7, buf, mr) // posted before accepting: iWARP has no RNR
		if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: []byte("welcome")}); err != nil {
			panic(err)
		}
		wc, err := req.GetRecvComp(ctx) // blocks until the message is in
		if err != nil {
			panic(err)
		}
		fmt.Printf("server: wr_id %d, %v, %q\n", wc.WRID, wc.Status, buf[:wc.ByteLen])
	}()

	id, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), attr, &rdmacm.ConnParam{PrivateData: []byte("hello?")})
	if err != nil {
		panic(err)
	}
	defer id.Close()
	fmt.Printf("client: accepted with %q\n", id.PrivateData())
	if err := id.PostSend(1, []byte("hello, iWARP"), nil, verbs.SendInline|verbs.SendSignaled); err != nil {
		panic(err)
	}
	wc, _ := id.GetSendComp(ctx)
	<-done
	fmt.Printf("client: send %v\n", wc.Status)
	// Output:
	// server: request with "hello?"
	// client: accepted with "welcome"
	// server: wr_id 7, success, "hello, iWARP"
	// client: send success
}

// A listener's address prints as Dial takes it, scheme and all, and a
// refused connection is a rejection whose cause errors.Is sees.
func ExampleID_LocalAddr() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := fmt.Sprintf("unix:@goverbs-example-%d", os.Getpid())
	ln, err := rdmacm.Listen(name)
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.LocalAddr().String() == name) // the address to give a client
	ln.Close()

	_, err = rdmacm.Dial(ctx, name, nil, nil) // nobody listens there now
	var rej *rdmacm.RejectedError
	fmt.Println(errors.As(err, &rej), errors.Is(err, syscall.ECONNREFUSED))

	_, err = rdmacm.Dial(ctx, "unix:", nil, nil)
	fmt.Println(err)
	// Output:
	// true
	// true true
	// rdmacm: invalid argument: address "unix:" is empty
}

// One event channel serves a listener and every connection it accepts:
// a server loop reads the channel (or waits for its Fd in epoll) instead
// of one goroutine per identifier.
func ExampleNewEventChannel() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, _ := rdmacm.NewEventChannel()
	defer ch.Close()
	ln, _ := rdmacm.CreateID("127.0.0.1:0")
	ln.Migrate(ch)
	ln.Listen()
	defer ln.Close()

	go func() {
		c, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), nil, nil)
		if err == nil {
			c.Close()
		}
	}()
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(ev.Type)
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			ev.ID.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			ev.ID.Accept(ctx, nil)
		case rdmacm.EventDisconnected:
			ev.ID.Close()
			return
		}
	}
	// Output:
	// RDMA_CM_EVENT_CONNECT_REQUEST
	// RDMA_CM_EVENT_ESTABLISHED
	// RDMA_CM_EVENT_DISCONNECTED
}
