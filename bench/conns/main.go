// Command conns measures what rdmacm connections cost: it opens N iWARP
// connections (Dial/Accept with default attributes) between two
// processes and reports, per connection end, descriptors, goroutines and
// memory, and the setup time per 1,000. bench/conns.sh runs both ends.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	server := flag.Bool("server", false, "accept instead of dialing")
	addr := flag.String("addr", "127.0.0.1:7471", "address")
	n := flag.Int("n", 10000, "connections")
	hold := flag.Duration("hold", 2*time.Second, "how long the ends stay connected after the last one")
	flag.Parse()
	ctx := context.Background()
	fds0, g0, m0 := measure()
	start := time.Now()
	var ids []*rdmacm.ID
	if *server {
		ln, err := rdmacm.Listen(*addr)
		if err != nil {
			fail(err)
		}
		fmt.Println("listening")
		for len(ids) < *n {
			req, err := ln.GetRequest(ctx)
			if err != nil {
				fail(err)
			}
			if err := req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
				fail(fmt.Errorf("connection %d: %w", len(ids), err))
			}
			if err := req.Accept(ctx, nil); err != nil {
				fail(fmt.Errorf("connection %d: %w", len(ids), err))
			}
			if len(ids) == 0 {
				start = time.Now()
			}
			ids = append(ids, req)
		}
	} else {
		for len(ids) < *n {
			c, err := rdmacm.Dial(ctx, *addr, nil, nil)
			if err != nil {
				fail(fmt.Errorf("connection %d: %w", len(ids), err))
			}
			ids = append(ids, c)
		}
	}
	took := time.Since(start)
	fds1, g1, m1 := measure()
	k := float64(len(ids))
	role := "dialer"
	if *server {
		role = "acceptor"
	}
	fmt.Printf("%s: %d connections in %v (%.0f ms per 1,000); per end: %.2f descriptors, %.2f goroutines, %.1f KiB\n",
		role, len(ids), took.Round(time.Millisecond), float64(took.Milliseconds())/k*1000, float64(fds1-fds0)/k, float64(g1-g0)/k, float64(m1-m0)/k/1024)
	time.Sleep(*hold)
	for _, id := range ids {
		id.Close()
	}
}

// measure returns the process's descriptors, goroutines and the memory the
// Go runtime holds from the OS.
func measure() (fds, goroutines int, mem uint64) {
	runtime.GC()
	ents, _ := os.ReadDir("/proc/self/fd")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return len(ents), runtime.NumGoroutine(), ms.Sys - ms.HeapReleased
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "conns:", err)
	os.Exit(1)
}
