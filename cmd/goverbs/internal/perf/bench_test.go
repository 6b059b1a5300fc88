package perf

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkLoopbackWriteBW runs `goverbs perf write_bw -d shm0` in this
// process (server and client, as the command does) at the sizes where shm
// trailed its peers, one request per PostSend and lists of 16 (-l 16); b.N is the number of messages. MB/s is the run's
// average, Mmsg/s its message rate.
func BenchmarkLoopbackWriteBW(b *testing.B) {
	for _, size := range []int{8, 4096} {
		for _, list := range []int{1, 16} {
			b.Run(fmt.Sprintf("shm0/size=%d/list=%d", size, list), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				addr := fmt.Sprintf("unix:@goverbs-perf-bench-%d-%d-%d", os.Getpid(), size, list)
				b.SetBytes(int64(size))
				r, err := Loopback(ctx, addr, Config{Test: "write_bw", Size: size, Iters: max(b.N, 1000), TxDepth: 128, CQMod: 100, PostList: list})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.MsgRate, "Mmsg/s")
				b.ReportMetric(r.AvgMBs, "MB/s-run")
			})
		}
	}
}

// BenchmarkLoopbackSendLat runs `goverbs perf send_lat -d iwarp0` in this
// process at 1 MiB, where iWARP trailed its peers; b.N is the number of
// timed iterations (after 200 warm-up ones). us/oneway-mean and -p50 are
// the command's t_avg and t_typical.
func BenchmarkLoopbackSendLat(b *testing.B) {
	for _, size := range []int{8, 1 << 20} {
		b.Run(fmt.Sprintf("iwarp0/size=%d", size), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			r, err := Loopback(ctx, "127.0.0.1:0", Config{Test: "send_lat", Size: size, Iters: max(b.N, 10), Warmup: 200})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.Avg, "us/oneway-mean")
			b.ReportMetric(r.Typical, "us/oneway-p50")
			b.ReportMetric(r.P99, "us/oneway-p99")
		})
	}
}
