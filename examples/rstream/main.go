// Command rstream is the Go counterpart of librdmacm's rstream example in
// its custom mode (-S, -C, -I): a client and a server that exchange
// transfers over an rsocket stream, here a goverbs rsocket.Conn, so that
// each side interoperates with the C program over iWARP (siw):
//
//	rstream -b 10.77.0.2 -S 4096 -C 100 -T v        # C server (rdma-core)
//	go run ./examples/rstream -s 10.77.0.2 -S 4096 -C 100 -T v
//
// As in rstream: a 16-byte sync each way, then per iteration -C transfers
// of -S bytes from the client and as many back from the server, then
// shutdown and close. With -T v every byte is checked against rstream's
// pattern (a counter modulo 256 running over the whole stream, each way).
// Addresses are host names or IPs (iWARP); -a gives any rdmacm address
// instead (unix:@name for shared memory between two goverbs peers).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"time"

	"github.com/goverbs/goverbs/rsocket"
)

var (
	server   = flag.String("s", "", "server address (client mode)")
	bind     = flag.String("b", "", "bind address (server mode)")
	port     = flag.String("p", "7471", "port")
	addr     = flag.String("a", "", "rdmacm address, instead of -s/-b and -p (listens unless -c)")
	dial     = flag.Bool("c", false, "with -a: connect to it")
	size     = flag.Int("S", 1000, "transfer size")
	count    = flag.Int("C", 1000, "transfers per iteration")
	iters    = flag.Int("I", 1, "iterations")
	testOpt  = flag.String("T", "", "test options: v verifies the data")
	timeout  = flag.Duration("t", time.Minute, "deadline of the whole run")
	verify   bool
	sendData byte // rstream's format_buf counter
	recvData byte // and verify_buf's
	recvSeen int64
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	verify = strings.Contains(*testOpt, "v")
	c, err := connect()
	if err != nil {
		log.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(*timeout))
	if err := run(c); err != nil {
		c.Close()
		log.Fatal(err)
	}
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
}

func isClient() bool { return *server != "" || (*addr != "" && *dial) }

func connect() (net.Conn, error) {
	client := isClient()
	a := *addr
	if a == "" {
		host := *bind
		if client {
			host = *server
		}
		a = net.JoinHostPort(host, *port)
	}
	if client {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return rsocket.Dial(ctx, a)
	}
	ln, err := rsocket.Listen(a)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	return ln.Accept()
}

func send(c net.Conn, buf []byte) error {
	if verify {
		for i := range buf {
			buf[i] = sendData
			sendData++
		}
	}
	_, err := c.Write(buf)
	return err
}

func recv(c net.Conn, buf []byte) error {
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if verify {
		for i, b := range buf {
			if b != recvData {
				return fmt.Errorf("data verification failed byte %d", recvSeen+int64(i))
			}
			recvData++
		}
		recvSeen += int64(len(buf))
	}
	return nil
}

func run(c net.Conn) error {
	client := isClient()
	sync := make([]byte, 16)
	if client {
		if err := send(c, sync); err != nil {
			return err
		}
		if err := recv(c, sync); err != nil {
			return err
		}
	} else {
		if err := recv(c, sync); err != nil {
			return err
		}
		if err := send(c, sync); err != nil {
			return err
		}
	}
	buf := make([]byte, *size)
	start := time.Now()
	for range *iters {
		for range *count {
			var err error
			if client {
				err = send(c, buf)
			} else {
				err = recv(c, buf)
			}
			if err != nil {
				return err
			}
		}
		for range *count {
			var err error
			if client {
				err = recv(c, buf)
			} else {
				err = send(c, buf)
			}
			if err != nil {
				return err
			}
		}
	}
	el := time.Since(start)
	bytes := int64(*iters) * int64(*count) * int64(*size) * 2
	fmt.Printf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	fmt.Printf("%-10s%-8d%-8d%-8d%-8d%8.2fs%10.2f%11.2f\n", "custom", *size, *count, *iters, bytes,
		el.Seconds(), float64(bytes*8)/el.Seconds()/1e9, float64(el.Microseconds())/float64(*iters)/float64(*count*2))
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	return nil
}
