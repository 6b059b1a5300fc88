package perf

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
)

// Every test runs in loopback over iWARP and over shm and produces
// plausible figures.
func TestLoopback(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		t.Run(dev, func(t *testing.T) { testLoopback(t, dev) })
	}
}

func testLoopback(t *testing.T, dev string) {
	for _, test := range Tests {
		if test == "write_lat" && raceEnabled {
			t.Log("write_lat is measured in the run without -race (see race_test.go)")
			continue
		}
		for _, size := range []int{8, 4096} {
			t.Run(test, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				addr := "127.0.0.1:0"
				if dev == "shm0" {
					addr = fmt.Sprintf("unix:@goverbs-perf-test-%d-%s-%d", os.Getpid(), test, size)
				}
				r, err := Loopback(ctx, addr, Config{Test: test, Size: size, Iters: 200, TxDepth: 16})
				if err != nil {
					t.Fatal(err)
				}
				if r.Iters < 1 {
					t.Fatalf("%s: %+v", test, r)
				}
				if (&Config{Test: test}).lat() {
					if !(r.Min > 0 && r.Min <= r.Typical && r.Typical <= r.Max && r.P99 <= r.Max) {
						t.Fatalf("%s: latency figures out of order: %+v", test, r)
					}
				} else if r.AvgMBs <= 0 || r.PeakMBs < r.AvgMBs || r.MsgRate <= 0 {
					t.Fatalf("%s: bandwidth figures: %+v", test, r)
				}
			})
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []Config{{Test: "nope", Size: 8, Iters: 1}, {Test: "send_lat", Size: 0, Iters: 1}, {Test: "send_lat", Size: 8, Iters: 0}} {
		if err := c.Check(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
