package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
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

// HTTP over shared memory: net/http serves the listener and dials through
// rsocket.Dial, unchanged.
func Example_http() {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s", r.URL.Path[1:])
	})
	ln, _ := rsocket.Listen("unix:@my-service")
	go http.Serve(ln, handler)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return rsocket.Dial(ctx, "unix:@my-service")
	}}
	defer ln.Close()
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://my-service/rdma")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output: hello, rdma
}
