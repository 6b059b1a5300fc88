// Package rsocketbench measures package rsocket against the kernel's
// sockets (net.UnixConn, loopback net.TCPConn), both ends in one process:
// ping-pong latency and streaming throughput at 64 B, 4 KiB, 64 KiB and
// 1 MiB. bench/rsocket.sh runs it in interleaved rounds and prints ratios.
package rsocketbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/rsocket"
)

var sizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

// transports are the connections compared; each returns a connected pair.
var transports = []struct {
	name string
	pair func() (net.Conn, net.Conn, error)
}{
	{"rsocket-shm", func() (net.Conn, net.Conn, error) {
		return rsPair(fmt.Sprintf("unix:@rsocket-bench-%d-%d", os.Getpid(), time.Now().UnixNano()))
	}},
	{"unix", func() (net.Conn, net.Conn, error) {
		return netPair("unix", fmt.Sprintf("@rsocket-bench-unix-%d-%d", os.Getpid(), time.Now().UnixNano()))
	}},
	{"rsocket-loop", func() (net.Conn, net.Conn, error) {
		a, b, err := rsocket.Pipe()
		return a, b, err
	}},
	{"rsocket-iwarp", func() (net.Conn, net.Conn, error) { return rsPair("127.0.0.1:0") }},
	{"tcp", func() (net.Conn, net.Conn, error) { return netPair("tcp", "127.0.0.1:0") }},
}

func rsPair(addr string) (net.Conn, net.Conn, error) {
	ln, err := rsocket.Listen(addr)
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	da := addr
	if addr[0] != 'u' {
		da = ln.Addr().String()
	}
	return dialAccept(ln, func() (net.Conn, error) { return rsocket.Dial(context.Background(), da) })
}

func netPair(network, addr string) (net.Conn, net.Conn, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	return dialAccept(ln, func() (net.Conn, error) { return net.Dial(network, ln.Addr().String()) })
}

func dialAccept(ln net.Listener, dial func() (net.Conn, error)) (net.Conn, net.Conn, error) {
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c, err := dial()
	if err != nil {
		return nil, nil, err
	}
	s := <-ch
	if s == nil {
		c.Close()
		return nil, nil, fmt.Errorf("accept failed")
	}
	return c, s, nil
}

// BenchmarkPingPong: one message each way per iteration; ns/op is the
// round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, tr := range transports {
		for _, size := range sizes {
			b.Run(fmt.Sprintf("%s/%d", tr.name, size), func(b *testing.B) {
				c, s, err := tr.pair()
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				defer s.Close()
				go echoMsgs(s, size)
				buf := make([]byte, size)
				for range 20 { // warm-up
					c.Write(buf)
					io.ReadFull(c, buf)
				}
				b.SetBytes(int64(2 * size))
				b.ResetTimer()
				for range b.N {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStream: one side writes messages of the size, the other reads
// them; MB/s is the throughput.
func BenchmarkStream(b *testing.B) {
	for _, tr := range transports {
		for _, size := range sizes {
			b.Run(fmt.Sprintf("%s/%d", tr.name, size), func(b *testing.B) {
				c, s, err := tr.pair()
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				total := int64(b.N) * int64(size)
				done := make(chan error, 1)
				go func() {
					buf := make([]byte, max(size, 64<<10))
					var got int64
					for got < total {
						n, err := s.Read(buf)
						got += int64(n)
						if err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				buf := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Close()
			})
		}
	}
}

// echoMsgs writes back each size-byte message it reads from rw until either
// fails.
func echoMsgs(rw io.ReadWriter, size int) {
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(rw, buf); err != nil {
			return
		}
		if _, err := rw.Write(buf); err != nil {
			return
		}
	}
}
