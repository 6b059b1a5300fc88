package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// The server and the client of udaddy's protocol, together, over RoCE on
// two loopback addresses of this process's own.
func TestUDaddy(t *testing.T) {
	p := os.Getpid()
	a := func(n byte) netip.Addr {
		return netip.AddrFrom4([4]byte{127, byte(16 + p%200), byte(p / 200 % 250), n})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, size := range []int{1, 100, 1024} {
		port := fmt.Sprint(7500 + size)
		served := make(chan error, 1)
		go func() { served <- serve(ctx, "roce://"+net.JoinHostPort(a(11).String(), port), 10, size) }()
		var err error
		for try := 0; try < 50; try++ { // until the server listens
			if err = client(ctx, "roce://"+net.JoinHostPort(a(11).String(), port), a(12).String(), 10, size); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("size %d: client: %v", size, err)
		}
		if err := <-served; err != nil {
			t.Fatalf("size %d: server: %v", size, err)
		}
	}
}
