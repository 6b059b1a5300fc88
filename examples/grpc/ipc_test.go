package main

import (
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

// serveEnv names the address a re-executed test binary serves the echo
// service at (BenchmarkUnaryIPC's server process): rsocket's address, or
// "kernel:" and a Unix socket name.
const serveEnv = "GOVERBS_GRPC_SERVE"

func TestMain(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		os.Exit(rsocketbench.ServeIPC(addr, serveOnly))
	}
	os.Exit(m.Run())
}

// serveOnly serves the echo service at addr until stop is called.
func serveOnly(addr string) (stop func(), err error) {
	var ln net.Listener
	if name, ok := strings.CutPrefix(addr, "kernel:"); ok {
		ln, err = net.Listen("unix", name)
	} else {
		ln, err = rsocket.Listen(addr)
	}
	if err != nil {
		return nil, err
	}
	srv := newServer()
	go srv.Serve(ln)
	return srv.Stop, nil
}

// ipcSetup starts a server process for transport tr ("rsocket-shm" or
// "unix") and returns a client of it: gRPC between two processes, as
// same-host IPC runs, each with its own scheduler (BenchmarkUnary has both
// ends in one process, sharing its CPUs' Go scheduler).
func ipcSetup(b *testing.B, tr string) (*grpc.ClientConn, *rsocketbench.IPC) {
	name := fmt.Sprintf("@goverbs-grpc-ipc-%d-%d", os.Getpid(), time.Now().UnixNano())
	addr, target := "unix:"+name, "unix:"+name
	dial := rsocket.Dial
	if tr == "unix" {
		addr, target = "kernel:"+name, name
		var d net.Dialer
		dial = func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "unix", a) }
	}
	srv := rsocketbench.StartIPC(b, serveEnv, addr)
	cc, err := grpc.NewClient("passthrough:///"+target, dialOptions(dial)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc, srv
}

// BenchmarkUnaryIPC is BenchmarkUnary with the server in another process;
// cpu-us/op and csw/op are what a call cost both processes.
func BenchmarkUnaryIPC(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				cc, srv := ipcSetup(b, tr)
				benchUnaryIPC(b, cc, srv, size)
			})
		}
	}
}

func benchUnaryIPC(b *testing.B, cc *grpc.ClientConn, srv *rsocketbench.IPC, size int) {
	ctx := context.Background()
	in, out := make([]byte, size), []byte(nil)
	for range 10 {
		if err := unary(ctx, cc, in, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * size))
	srv.Begin(b)
	b.ResetTimer()
	for range b.N {
		if err := unary(ctx, cc, in, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	srv.End(b)
}
