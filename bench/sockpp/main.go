// Command sockpp is the kernel-socket baseline of bench/compare.sh: a
// blocking ping-pong of SIZE-byte messages between two processes over a
// Unix stream socket or loopback TCP, each side's goroutine blocked in
// the netpoller between messages, as a Go program using net.Conn is. It
// measures as goverbs perf's latency tests do: one time stamp per
// iteration, right after the write; a sample is the time between two
// consecutive stamps (one round trip), halved; it prints the median and
// the mean of the samples, in microseconds, as one JSON line with goverbs
// perf's field names.
//
//	sockpp -server -net unix -addr @name      (or -net tcp -addr 127.0.0.1:7510)
//	sockpp -net unix -addr @name -s 8 -n 10000 -w 1000
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

func main() {
	server := flag.Bool("server", false, "answer one client's ping-pong, then exit")
	network := flag.String("net", "unix", "unix (stream socket; @name is abstract) or tcp")
	addr := flag.String("addr", "@goverbs-sockpp", "address")
	size := flag.Int("s", 8, "message size in bytes")
	iters := flag.Int("n", 10000, "timed round trips")
	warm := flag.Int("w", 1000, "untimed round trips first")
	flag.Parse()
	var err error
	if *server {
		err = serve(*network, *addr)
	} else {
		err = run(*network, *addr, *size, *iters, *warm)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sockpp:", err)
		os.Exit(1)
	}
}

// serve accepts one connection and echoes messages of the size its first
// 8 bytes announce until the client closes it.
func serve(network, addr string) error {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint64(hdr[:])
	if n < 1 || n > 64<<20 {
		return fmt.Errorf("message size %d out of range", n)
	}
	buf := make([]byte, n)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}

func run(network, addr string, size, iters, warm int) error {
	if size < 1 || size > 64<<20 || iters < 1 || warm < 0 {
		return fmt.Errorf("size %d, iterations %d, warm-up %d", size, iters, warm)
	}
	var c net.Conn
	var err error
	for try := 0; try < 50; try++ { // the server may still be starting
		if c, err = net.Dial(network, addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	if _, err := c.Write(hdr[:]); err != nil {
		return err
	}
	out, in := make([]byte, size), make([]byte, size)
	stamps := make([]time.Duration, 0, iters+1)
	base := time.Now()
	for i := range warm + iters {
		if _, err := c.Write(out); err != nil {
			return err
		}
		if i >= warm {
			stamps = append(stamps, time.Since(base))
		}
		if _, err := io.ReadFull(c, in); err != nil {
			return err
		}
	}
	stamps = append(stamps, time.Since(base))
	d := make([]float64, iters)
	sum := 0.0
	for i := range d {
		d[i] = float64(stamps[i+1]-stamps[i]) / 2 / 1e3
		sum += d[i]
	}
	slices.Sort(d)
	b, _ := json.Marshal(map[string]any{"test": "pingpong", "net": network, "bytes": size, "iterations": iters,
		"t_typical_us": d[len(d)/2], "t_avg_us": sum / float64(len(d))})
	fmt.Println(string(b))
	return nil
}
