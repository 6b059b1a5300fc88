package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

const soakHelp = `usage: goverbs soak [ADDR] [-D DURATION] [-q CONNS] [--kill-every DURATION]

Runs mixed RDMA operations against a peer process it starts, for a given
time, and verifies every byte: each round of each connection writes a
random-length pattern (RDMA WRITE), announces it (SEND with immediate),
has the peer check it and answer (SEND), reads it back (RDMA READ) and
counts with a fetch-and-add that must return the count so far. At random
a connection is closed and dialed again; now and then the peer process is
killed (SIGKILL) and started again, and every connection must then end
with its work requests flushed and be dialed again. At the end it prints
operations, bytes verified, reconnects, kills survived, and what was lost
(a work request that never completed) or corrupted (a byte that differs):
both must be 0, or the exit status is 1.

ADDR (or --addr ADDR) is any rdmacm address the peer listens on:
host:port (iwarp0; port 0 takes a free one; 127.0.0.1:0 by default),
unix:@name or unix:/path (shm0). Durations are seconds (90) or Go
durations (1m30s).
`

func soak(args []string) error {
	fs := newCommand("soak", soakHelp)
	addr := fs.String("addr", "127.0.0.1:0", "the peer's address (or ADDR)")
	dur := fs.duration("duration", "D", time.Minute, "how long to run")
	conns := fs.IntP("qps", "q", 8, "connections")
	killEvery := fs.duration("kill-every", "", 20*time.Second, "kill and restart the peer this often (0: never)")
	peer := fs.Bool("peer", false, "be the peer (the soak starts it)")
	fs.MarkHidden("peer")
	fs.movedLetter("a", "soak's address is ADDR or --addr")
	args, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(args) > 0 && fs.Changed("addr") {
		return badUsage("soak", "ADDR %q and --addr %q: give one", args[0], *addr)
	}
	if len(args) > 0 {
		*addr, args = args[0], args[1:]
	}
	if err := fs.noArgs(args); err != nil {
		return err
	}
	switch {
	case *dur <= 0:
		return badUsage("soak", "-D %v: a positive duration", *dur)
	case *conns < 1:
		return badUsage("soak", "-q %d: at least one connection", *conns)
	case *killEvery < 0:
		return badUsage("soak", "--kill-every %v: 0 (never) or a positive duration", *killEvery)
	}
	if *peer {
		return soakPeer(*addr)
	}
	if err := fs.begin(); err != nil {
		return err
	}
	return soakDrive(*addr, *dur, *conns, *killEvery)
}

const soakRegion = 64 << 10

// soakStats are the run's counts.
type soakStats struct {
	ops, verified, reconnects, kills, lost, corrupted, dropped atomic.Uint64
}

// soakDrive runs the soak against peers it starts at addr.
func soakDrive(addr string, dur time.Duration, n int, killEvery time.Duration) error {
	var st soakStats
	var mu sync.Mutex
	var cmd *exec.Cmd
	var cur atomic.Pointer[string] // where the peer listens now (a port 0 changes with each start)
	start := func() error {
		c := exec.Command(os.Args[0], "soak", "--peer", "--addr", addr)
		out, err := c.StdoutPipe()
		if err != nil {
			return err
		}
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			return err
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		at, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if !ok {
			c.Process.Kill()
			c.Wait()
			return fmt.Errorf("soak peer: %q", line)
		}
		cur.Store(&at)
		mu.Lock()
		cmd = c
		mu.Unlock()
		return nil
	}
	if err := start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	if killEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(killEvery/2 + rand.N(killEvery)):
				}
				mu.Lock()
				c := cmd
				mu.Unlock()
				c.Process.Kill()
				c.Wait()
				st.kills.Add(1)
				for ctx.Err() == nil {
					if err := start(); err == nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			soakWorker(ctx, &cur, uint64(i), &st)
		}()
	}
	wg.Wait()
	mu.Lock()
	cmd.Process.Kill()
	cmd.Wait()
	mu.Unlock()
	fmt.Printf("soak %s, %v, %d connections: %d operations, %d bytes verified, %d reconnects, %d peer kills survived, %d connections ended by them; lost %d, corrupted %d\n",
		addr, dur, n, st.ops.Load(), st.verified.Load(), st.reconnects.Load(), st.kills.Load(), st.dropped.Load(), st.lost.Load(), st.corrupted.Load())
	if st.lost.Load() > 0 || st.corrupted.Load() > 0 {
		return errors.New("soak: work lost or corrupted")
	}
	return nil
}

var errSoakConn = errors.New("connection ended")

// soakWorker dials and runs rounds until ctx ends.
func soakWorker(ctx context.Context, addr *atomic.Pointer[string], w uint64, st *soakStats) {
	rng := rand.New(rand.NewPCG(w, uint64(time.Now().UnixNano())))
	for conn := uint64(0); ctx.Err() == nil; conn++ {
		err := soakConn(ctx, *addr.Load(), w<<32|conn, rng, st)
		switch {
		case err == nil:
			st.reconnects.Add(1)
		case errors.Is(err, errSoakConn):
			st.dropped.Add(1)
		case ctx.Err() == nil:
			time.Sleep(50 * time.Millisecond) // the peer is restarting
		}
	}
}

// soakConn runs one connection's rounds: nil when it chose to close it.
func soakConn(ctx context.Context, addr string, key uint64, rng *rand.Rand, st *soakStats) error {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	id, err := rdmacm.Dial(dctx, addr, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}},
		&rdmacm.ConnParam{InitiatorDepth: 4, ResponderResources: 4, Extensions: true, RNRRetryCount: 7})
	cancel()
	if err != nil {
		return err
	}
	defer id.Close()
	pd := id.PrivateData()
	if len(pd) < 12 {
		return fmt.Errorf("private data %d bytes", len(pd))
	}
	raddr, rkey := binary.LittleEndian.Uint64(pd), binary.LittleEndian.Uint32(pd[8:])
	buf := make([]byte, 2*soakRegion+64)
	mr, err := id.PD().RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	src, dst, msg, reply, old := buf[:soakRegion], buf[soakRegion:2*soakRegion], buf[2*soakRegion:][:16], buf[2*soakRegion+16:][:16], buf[2*soakRegion+32:][:8]
	qp := id.QP()
	// wait takes the completion of a request: a lost one (none in 10 s) is
	// counted; an error ends the connection.
	var round uint64
	wait := func(get func(context.Context) (verbs.WC, error), what string) error {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wc, err := get(c)
		if err != nil {
			st.lost.Add(1)
			fmt.Fprintf(os.Stderr, "soak: lost: connection %#x round %d: no %s completion: %v (QP %v)\n", key, round, what, err, qp.State())
			return fmt.Errorf("%w: %v", errSoakConn, err)
		}
		if wc.Status != verbs.WCSuccess {
			return fmt.Errorf("%w: %v", errSoakConn, wc.Status)
		}
		st.ops.Add(1)
		return nil
	}
	off := func(b []byte) uint64 { return mr.Addr() + uint64(len(buf)-cap(b)) } // the address of a subslice of buf
	for ; ; round++ {
		if ctx.Err() != nil || rng.IntN(50) == 0 {
			return nil // close it and dial again
		}
		n := 1 + rng.IntN(soakRegion-8)
		for i := range src[:n] {
			src[i] = byte(key*31 + round*7 + uint64(i)*13)
		}
		if err := id.PostRecv(round, reply, mr); err != nil {
			return fmt.Errorf("%w: %v", errSoakConn, err)
		}
		binary.LittleEndian.PutUint32(msg, uint32(n))
		binary.LittleEndian.PutUint32(msg[4:], crc32.ChecksumIEEE(src[:n]))
		wrs := []verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: off(src), Length: uint32(n), LKey: mr.LKey()}}, RemoteAddr: raddr, RKey: rkey},
			{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: uint32(round), SGList: []verbs.SGE{{Addr: off(msg), Length: 8, LKey: mr.LKey()}}},
		}
		if err := qp.PostSend(wrs); err != nil {
			return fmt.Errorf("%w: %v", errSoakConn, err)
		}
		for range 2 {
			if err := wait(id.GetSendComp, "send"); err != nil {
				return err
			}
		}
		if err := wait(id.GetRecvComp, "receive"); err != nil {
			return err
		}
		if binary.LittleEndian.Uint32(reply) != 1 || binary.LittleEndian.Uint32(reply[4:]) != uint32(round) {
			st.corrupted.Add(1) // the peer found other bytes than those written
		} else {
			st.verified.Add(uint64(n))
		}
		rd := []verbs.SendWR{
			{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: off(dst), Length: uint32(n), LKey: mr.LKey()}}, RemoteAddr: raddr, RKey: rkey},
			{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: off(old), Length: 8, LKey: mr.LKey()}},
				RemoteAddr: raddr + soakRegion, RKey: rkey, CompareAdd: 1},
		}
		if err := qp.PostSend(rd); err != nil {
			return fmt.Errorf("%w: %v", errSoakConn, err)
		}
		for range 2 {
			if err := wait(id.GetSendComp, "send"); err != nil {
				return err
			}
		}
		if string(dst[:n]) != string(src[:n]) {
			st.corrupted.Add(1)
		} else {
			st.verified.Add(uint64(n))
		}
		if binary.LittleEndian.Uint64(old) != round {
			st.corrupted.Add(1) // a fetch-and-add lost or applied twice
		}
	}
}

// soakPeer accepts connections at addr and answers each round: it checks
// the announced bytes of its region and replies.
func soakPeer(addr string) error {
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		return err
	}
	fmt.Println("listening", ln.LocalAddr()) // an address Dial takes, scheme and all
	ctx := context.Background()
	for {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			var ae *rdmacm.AcceptError
			if errors.As(err, &ae) {
				continue
			}
			return err
		}
		go soakServe(ctx, req)
	}
}

func soakServe(ctx context.Context, req *rdmacm.ID) {
	defer req.Close()
	if err := req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return
	}
	region := make([]byte, soakRegion+8)
	rmr, err := req.PD().RegMR(region, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		return
	}
	defer rmr.Dereg()
	msgs := make([]byte, 64)
	mmr, err := req.RegMsgs(msgs)
	if err != nil {
		return
	}
	defer mmr.Dereg()
	in, out := msgs[:16], msgs[16:32]
	if err := req.PostRecv(0, in, mmr); err != nil {
		return
	}
	var pd [12]byte
	binary.LittleEndian.PutUint64(pd[:], rmr.Addr())
	binary.LittleEndian.PutUint32(pd[8:], rmr.RKey())
	if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: pd[:], ResponderResources: 4, InitiatorDepth: 4}); err != nil {
		return
	}
	for {
		wc, err := req.GetRecvComp(ctx)
		if err != nil || wc.Status != verbs.WCSuccess {
			return
		}
		n, sum := binary.LittleEndian.Uint32(in), binary.LittleEndian.Uint32(in[4:])
		ok := uint32(0)
		if n <= soakRegion && crc32.ChecksumIEEE(region[:n]) == sum {
			ok = 1
		}
		binary.LittleEndian.PutUint32(out, ok)
		binary.LittleEndian.PutUint32(out[4:], wc.ImmData)
		if err := req.PostRecv(0, in, mmr); err != nil {
			return
		}
		if err := req.PostSend(1, out[:8], mmr, verbs.SendSignaled); err != nil {
			return
		}
		if wc, err := req.GetSendComp(ctx); err != nil || wc.Status != verbs.WCSuccess {
			return
		}
	}
}
