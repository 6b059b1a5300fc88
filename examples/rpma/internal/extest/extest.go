// Package extest runs an example's server and client together in a test,
// over loopback iWARP.
package extest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/internal/leakcheck"
)

// Func is an example's server or client.
type Func func(ctx context.Context, o *common.Opts, args []string) error

// Buffer is a bytes.Buffer safe for concurrent writers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Run runs server with sargs and then, once it listens, each of clients
// with its args (one after another, or all at once with parallel), and
// returns what the server and the clients printed. so and co, when not
// nil, adjust the options.
func Run(t *testing.T, server Func, sargs []string, client Func, cargs [][]string, parallel bool, adjust func(server bool, o *common.Opts)) (sout string, couts []string) {
	t.Helper()
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sb Buffer
	port := make(chan string, 1)
	so := &common.Opts{Addr: "127.0.0.1", Port: "0", Out: &sb, Ready: func(p string) { port <- p }}
	if adjust != nil {
		adjust(true, so)
	}
	errc := make(chan error, 1)
	go func() { errc <- server(ctx, so, sargs) }()
	var p string
	select {
	case p = <-port:
	case err := <-errc:
		t.Fatalf("server ended before listening: %v\n%s", err, sb.String())
	case <-ctx.Done():
		t.Fatal("server did not listen")
	}
	cbs := make([]Buffer, len(cargs))
	cerrs := make([]error, len(cargs))
	var wg sync.WaitGroup
	for i, a := range cargs {
		co := &common.Opts{Addr: "127.0.0.1", Port: p, Out: &cbs[i]}
		if adjust != nil {
			adjust(false, co)
		}
		run := func() { cerrs[i] = client(ctx, co, a) }
		if parallel {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		} else {
			run()
		}
	}
	wg.Wait()
	serr := <-errc
	for i := range cargs {
		couts = append(couts, cbs[i].String())
		if cerrs[i] != nil {
			t.Errorf("client %d: %v\n%s", i, cerrs[i], couts[i])
		}
	}
	if serr != nil {
		t.Errorf("server: %v\n%s", serr, sb.String())
	}
	return sb.String(), couts
}
