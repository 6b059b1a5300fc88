package rsocketbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/rsocket"
)

// echoEnv names the address a re-executed test binary serves an echo of
// fixed-size messages at (BenchmarkManyConnsIPC's server process).
const echoEnv = "GOVERBS_ECHO_SERVE"

// manySize is the size of BenchmarkManyConnsIPC's messages.
const manySize = 64

// serveEcho sends back every manySize-byte message of every connection
// accepted at addr, a goroutine per connection, until stop is called.
func serveEcho(addr string) (stop func(), err error) {
	ln, err := ListenIPC(addr)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go echoMsgs(c, manySize)
		}
	}()
	return func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}, nil
}

// BenchmarkManyConnsIPC: a server process's echo of 64-byte messages on
// many connections at once, each with a client goroutine of its own that
// writes a message and reads the answer, as a service's many callers
// share it; ns/op is one round trip of the whole (b.N round trips shared
// among the connections), cpu-us/op and csw/op what it cost both
// processes. It shows whether the readers' spins crowd each other out
// when more goroutines wait than there are CPUs.
func BenchmarkManyConnsIPC(b *testing.B) {
	for _, conns := range []int{1, 4, 32, 128} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, conns), func(b *testing.B) {
				name := fmt.Sprintf("@goverbs-many-ipc-%d-%d", os.Getpid(), time.Now().UnixNano())
				addr := "unix:" + name
				dial := func(ctx context.Context) (net.Conn, error) { return rsocket.Dial(ctx, addr) }
				if tr == "unix" {
					addr = "kernel:" + name
					var d net.Dialer
					dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", name) }
				}
				srv := StartIPC(b, echoEnv, addr)
				cs := make([]net.Conn, conns)
				for i := range cs {
					c, err := dial(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					cs[i] = c
				}
				var left atomic.Int64
				run := func() error {
					var wg sync.WaitGroup
					errs := make(chan error, len(cs))
					for _, c := range cs {
						wg.Add(1)
						go func() {
							defer wg.Done()
							m := make([]byte, manySize)
							for left.Add(-1) >= 0 {
								if _, err := c.Write(m); err != nil {
									errs <- err
									return
								}
								if _, err := io.ReadFull(c, m); err != nil {
									errs <- err
									return
								}
							}
						}()
					}
					wg.Wait()
					close(errs)
					return <-errs
				}
				left.Store(int64(10 * conns))
				if err := run(); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(2 * manySize)
				left.Store(int64(b.N))
				srv.Begin(b)
				b.ResetTimer()
				err := run()
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				srv.End(b)
			})
		}
	}
}
