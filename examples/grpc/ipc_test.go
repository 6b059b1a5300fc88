package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/goverbs/goverbs/rsocket"
)

// serveEnv names the address a re-executed test binary serves the echo
// service at (BenchmarkUnaryIPC's server process): rsocket's address, or
// "kernel:" and a Unix socket name.
const serveEnv = "GOVERBS_GRPC_SERVE"

func TestMain(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		os.Exit(serveOnly(addr))
	}
	os.Exit(m.Run())
}

// serveOnly serves the echo service at addr until its standard input
// closes (the benchmark ends, or dies), saying "ready" once it listens.
func serveOnly(addr string) int {
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
	srv := newServer()
	go srv.Serve(ln)
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	srv.Stop()
	return 0
}

// ipcSetup starts a server process for transport tr ("rsocket-shm" or
// "unix") and returns a client of it: gRPC between two processes, as
// same-host IPC runs, each with its own scheduler (BenchmarkUnary has both
// ends in one process, sharing its CPUs' Go scheduler).
func ipcSetup(b *testing.B, tr string) *grpc.ClientConn {
	name := fmt.Sprintf("@goverbs-grpc-ipc-%d-%d", os.Getpid(), time.Now().UnixNano())
	addr, target := "unix:"+name, "unix:"+name
	dial := rsocket.Dial
	if tr == "unix" {
		addr, target = "kernel:"+name, name
		var d net.Dialer
		dial = func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "unix", a) }
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
	cc, err := grpc.NewClient("passthrough:///"+target, dialOptions(dial)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

// BenchmarkUnaryIPC is BenchmarkUnary with the server in another process.
func BenchmarkUnaryIPC(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, tr := range []string{"rsocket-shm", "unix"} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				benchUnary(b, ipcSetup(b, tr), size)
			})
		}
	}
}
