package rsocketbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
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
		os.Exit(serveHTTP(addr))
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

// serveHTTP serves echo at addr until standard input closes (the
// benchmark ends, or dies), saying "ready" once it listens.
func serveHTTP(addr string) int {
	var ln net.Listener
	var err error
	if name, ok := strings.CutPrefix(addr, "kernel:"); ok {
		ln, err = net.Listen("unix", name)
	} else {
		ln, err = rsocket.Listen(addr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// httpIPCSetup starts a server process for transport tr ("rsocket-shm" or
// "unix") and returns a client of it that keeps one connection, as a
// service talking to its sidecar does.
func httpIPCSetup(b *testing.B, tr string, dials *atomic.Int32) *http.Client {
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
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("server process: %q, %v", line, err)
	}
	tr2 := &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1, DisableCompression: true}
	b.Cleanup(tr2.CloseIdleConnections)
	return &http.Client{Transport: tr2}
}

// BenchmarkHTTPIPC: net/http request-response between two processes (the
// server a process of its own): a POST of size bytes, echoed back in the
// response, over one kept-alive connection; ns/op is the request's
// round trip.
func BenchmarkHTTPIPC(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				var dials atomic.Int32
				c := httpIPCSetup(b, tr, &dials)
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
				b.ResetTimer()
				for range b.N {
					call()
				}
				b.StopTimer()
				if n := dials.Load(); n != 1 {
					b.Fatalf("%d connections dialled, want one kept alive", n)
				}
			})
		}
	}
}
