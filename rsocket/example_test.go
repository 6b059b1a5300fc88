package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/goverbs/goverbs/rsocket"
)

// A server and a client over shared memory, in one process here.
func Example() {
	ln, err := rsocket.Listen("unix:@rsocket-example")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client closes its side
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rsocket.Dial(ctx, "unix:@rsocket-example")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello over RDMA"))
	c.(*rsocket.Conn).CloseWrite()
	reply, _ := io.ReadAll(c)
	fmt.Println(string(reply))
	// Output: hello over RDMA
}

// Pipe connects two Conns inside the process, over the loop provider.
func ExamplePipe() {
	a, b, err := rsocket.Pipe()
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	go a.Write([]byte("ping"))
	buf := make([]byte, 4)
	io.ReadFull(b, buf)
	fmt.Println(string(buf))
	// Output: ping
}

// Deadlines end blocked calls with a timeout error.
func ExampleConn_SetReadDeadline() {
	a, b, err := rsocket.Pipe()
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	a.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, err = a.Read(make([]byte, 1))
	fmt.Println(err.(interface{ Timeout() bool }).Timeout())
	// Output: true
}
