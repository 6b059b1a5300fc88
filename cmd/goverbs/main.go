// Command goverbs is goverbs' tool: it lists RDMA devices and runs a
// loopback demonstration with a benchmark.
//
//	goverbs devices [-v]     list devices (like ibv_devices; -v like ibv_devinfo)
//	goverbs demo [-n ITERS]  loopback demo and benchmark over the loop provider
//	goverbs ping -s|-c ...   rping over iWARP (interoperates with rdma-core's rping)
//	goverbs perf TEST ...    perftest-style latency and bandwidth tests over iWARP
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "devices":
		err = devices(os.Args[2:])
	case "demo":
		err = demo(os.Args[2:])
	case "ping":
		err = ping(os.Args[2:])
	case "perf":
		err = perfCmd(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "goverbs: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goverbs:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: goverbs COMMAND [flags]

commands:
  devices [-v]      list RDMA devices (-v: attributes and ports, like ibv_devinfo)
  demo [-n ITERS]   loopback demo (SEND/RECV, RDMA WRITE/READ, atomics, error
                    handling) and a benchmark table, over the in-process loop provider
  ping -s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d]
                    rping's protocol over iWARP/TCP: works against rdma-core's
                    rping on a Linux siw device, in both roles
  perf TEST [-s SIZE] [-a] [-n ITERS] [-D SECS] [-t DEPTH] [-p PORT] [-json] [-server | SERVER]
                    perftest-style send/write/read/atomic latency and bandwidth;
                    with no SERVER, both ends in this process (loopback)
`)
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("goverbs "+name, flag.ContinueOnError)
	return fs
}
