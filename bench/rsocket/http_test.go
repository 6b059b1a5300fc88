package rsocketbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/rsocket"
)

// serveEnv names the address a re-executed test binary serves HTTP at
// (BenchmarkHTTPIPC's server process): rsocket's address, or "kernel:"
// and a Unix socket name.
const serveEnv = "GOVERBS_HTTP_SERVE"

func TestMain(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		os.Exit(ServeIPC(addr, serveHTTP))
	}
	if addr := os.Getenv(echoEnv); addr != "" {
		os.Exit(ServeIPC(addr, serveEcho))
	}
	os.Exit(m.Run())
}

// echo answers a request with its body.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(body)
}

// serveHTTP serves echo at addr until stop is called.
func serveHTTP(addr string) (stop func(), err error) {
	ln, err := ListenIPC(addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

// httpIPCSetup starts a server process for transport tr ("rsocket-shm" or
// "unix") and returns a client of it that keeps one connection, as a
// service talking to its sidecar does.
func httpIPCSetup(b *testing.B, tr string, dials *atomic.Int32) (*http.Client, *IPC) {
	name := fmt.Sprintf("@goverbs-http-ipc-%d-%d", os.Getpid(), time.Now().UnixNano())
	addr := "unix:" + name
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		dials.Add(1)
		return rsocket.Dial(ctx, addr)
	}
	if tr == "unix" {
		addr = "kernel:" + name
		var d net.Dialer
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, "unix", name)
		}
	}
	srv := StartIPC(b, serveEnv, addr)
	tr2 := &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1, DisableCompression: true}
	b.Cleanup(tr2.CloseIdleConnections)
	return &http.Client{Transport: tr2}, srv
}

// BenchmarkHTTPIPC: net/http request-response between two processes (the
// server a process of its own): a POST of size bytes, echoed back in the
// response, over one kept-alive connection; ns/op is the request's
// round trip, cpu-us/op and csw/op what it cost both processes.
func BenchmarkHTTPIPC(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				var dials atomic.Int32
				c, srv := httpIPCSetup(b, tr, &dials)
				in := bytes.Repeat([]byte{'x'}, size)
				var out bytes.Buffer
				call := func() {
					resp, err := c.Post("http://sidecar/echo", "application/octet-stream", bytes.NewReader(in))
					if err != nil {
						b.Fatal(err)
					}
					// To the end, so that the connection is kept.
					out.Reset()
					_, err = out.ReadFrom(resp.Body)
					resp.Body.Close()
					if err != nil || out.Len() != size || resp.StatusCode != http.StatusOK {
						b.Fatalf("response: status %d, %d bytes, %v", resp.StatusCode, out.Len(), err)
					}
				}
				for range 10 {
					call()
				}
				b.SetBytes(int64(2 * size))
				srv.Begin(b)
				b.ResetTimer()
				for range b.N {
					call()
				}
				b.StopTimer()
				srv.End(b)
				if n := dials.Load(); n != 1 {
					b.Fatalf("%d connections dialled, want one kept alive", n)
				}
			})
		}
	}
}
