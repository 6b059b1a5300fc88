package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	rsocketbench "github.com/goverbs/goverbs/bench/rsocket"
	"github.com/goverbs/goverbs/rsocket"
)

// setup serves the echo service on ln and returns a client dialing with dial.
func setup(t testing.TB, ln net.Listener, target string, dial func(context.Context, string) (net.Conn, error)) *grpc.ClientConn {
	srv := newServer()
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///"+target, dialOptions(dial)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// rsocketSetup serves over rsocket at addr ("unix:@..." or "127.0.0.1:0").
func rsocketSetup(t testing.TB, addr string) *grpc.ClientConn {
	ln, err := rsocket.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	target := addr
	if !strings.HasPrefix(addr, "unix:") {
		target = ln.Addr().String()
	}
	return setup(t, ln, target, rsocket.Dial)
}

// unixSetup serves over a kernel Unix socket.
func unixSetup(t testing.TB) *grpc.ClientConn {
	name := fmt.Sprintf("@goverbs-grpc-unix-%d-%d", os.Getpid(), time.Now().UnixNano())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	return setup(t, ln, name, func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "unix", a) })
}

func uniqueUnix(tag string) string {
	return fmt.Sprintf("unix:@goverbs-grpc-%s-%d-%d", tag, os.Getpid(), time.Now().UnixNano())
}

func TestGRPC(t *testing.T) {
	for _, addr := range []string{uniqueUnix("test"), "127.0.0.1:0"} {
		t.Run(addr, func(t *testing.T) {
			cc := rsocketSetup(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, size := range []int{0, 1, 64, 4096, 100000, 1 << 20} {
				in := bytes.Repeat([]byte{byte(size)}, size)
				var out []byte
				if err := unary(ctx, cc, in, &out); err != nil {
					t.Fatalf("unary %d: %v", size, err)
				}
				if !bytes.Equal(in, out) {
					t.Fatalf("unary %d: got %d bytes back", size, len(out))
				}
			}
			st, err := openStream(ctx, cc)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				in := bytes.Repeat([]byte{byte(i)}, i*1000)
				if err := st.SendMsg(&in); err != nil {
					t.Fatal(err)
				}
				var out []byte
				if err := st.RecvMsg(&out); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(in, out) {
					t.Fatalf("stream message %d: %d bytes back", i, len(out))
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkUnary: one call per iteration, over rsocket (shm) and a Unix
// socket.
func BenchmarkUnary(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				var cc *grpc.ClientConn
				if tr == "unix" {
					cc = unixSetup(b)
				} else {
					cc = rsocketSetup(b, uniqueUnix("bench"))
				}
				benchUnary(b, cc, size, nil)
			})
		}
	}
}

// benchUnary makes b.N unary calls of size bytes each way on cc; srv,
// when not nil, is the server process, whose usage the calls report too.
func benchUnary(b *testing.B, cc *grpc.ClientConn, size int, srv *rsocketbench.IPC) {
	ctx := context.Background()
	in, out := make([]byte, size), []byte(nil)
	for range 10 {
		if err := unary(ctx, cc, in, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * size))
	if srv != nil {
		srv.Begin(b)
	}
	b.ResetTimer()
	for range b.N {
		if err := unary(ctx, cc, in, &out); err != nil {
			b.Fatal(err)
		}
	}
	if srv != nil {
		b.StopTimer()
		srv.End(b)
	}
}

// BenchmarkStream: messages streamed one way (the echo comes back on the
// same stream and is read by a second goroutine); MB/s counts one way.
func BenchmarkStream(b *testing.B) {
	for _, size := range []int{4096, 65536, 1 << 20} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				var cc *grpc.ClientConn
				if tr == "unix" {
					cc = unixSetup(b)
				} else {
					cc = rsocketSetup(b, uniqueUnix("bench"))
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				st, err := openStream(ctx, cc)
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					var out []byte
					for range b.N {
						if err := st.RecvMsg(&out); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				in := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					if err := st.SendMsg(&in); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				st.CloseSend()
			})
		}
	}
}
