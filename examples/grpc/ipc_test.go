package main

import (
	"context"
	"fmt"
	"net"
	"os"
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
	ln, err := rsocketbench.ListenIPC(addr)
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
				benchUnary(b, cc, size, srv)
			})
		}
	}
}
