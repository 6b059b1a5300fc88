package perf

import (
	"context"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// bwQP is one QP of a bandwidth run.
type bwQP struct {
	qp    *verbs.QP
	scq   *verbs.CQ
	wr    []verbs.SendWR
	depth int // when non-zero, a bound below Config.TxDepth (the ORD of reads)
	// credit, when set, is perftest's receiver-credit word, which the
	// receiver RDMA-WRITEs with its receive count: at most rxDepth sends
	// may be ahead of it.
	credit  []byte
	rxDepth int
	// ev is the event mode of the run (nil: polled), the same for every
	// QP of the run.
	ev *events

	posted, done int
	lastSig      bool // the last request posted was signaled
	sigTo        int  // the requests up to the last signaled one posted (its index plus one)
	unsig        int  // requests posted unsignaled since the last signaled one
}

func (s *side) bwQP(c *Config) *bwQP {
	op := verbs.WRRDMAWrite
	switch c.Test {
	case "send_bw":
		op = verbs.WRSend
	case "read_bw":
		op = verbs.WRRDMARead
	}
	k := &bwQP{qp: s.id.QP(), scq: s.id.SendCQ(), wr: make([]verbs.SendWR, max(c.PostList, 1)), ev: s.ev}
	for i := range k.wr {
		k.wr[i] = verbs.SendWR{Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}, RemoteAddr: s.raddr, RKey: s.rkey}
	}
	if op == verbs.WRRDMARead {
		k.depth = 16 // the ORD negotiated
	}
	return k
}

// warmUp posts c.Warmup requests on each QP of a bandwidth test, up to the
// send queue's depth at a time, and waits for them (Config.Warmup).
// send_bw has none (every receive is posted before the run).
func warmUp(ctx context.Context, c *Config, ks []*bwQP) error {
	if c.Test == "send_bw" {
		return nil
	}
	wc := make([]verbs.WC, 16)
	for _, k := range ks {
		depth := c.TxDepth
		if k.depth > 0 {
			depth = min(depth, k.depth)
		}
		wr := []verbs.SendWR{k.wr[0]}
		for left := c.Warmup; left > 0; {
			n := min(left, depth)
			for i := range n {
				wr[0].WRID, wr[0].Flags = 0, k.wr[0].Flags&^verbs.SendSignaled
				if i == n-1 {
					wr[0].Flags |= verbs.SendSignaled // its completion accounts for the others
				}
				if err := k.qp.PostSend(wr); err != nil {
					return err
				}
			}
			if err := k.ev.one(ctx, k.scq, wc); err != nil {
				return err
			}
			left -= n
		}
	}
	return nil
}

// lookBytes is how many bytes bandwidth posts between its looks at the
// clock.
const lookBytes = 1 << 20

// postEach is bandwidth's loop for one request per PostSend without
// credits (perftest's default): while the run goes on, it posts up to
// depth requests ahead of the completions, every mod-th signaled (and the
// run's last). Its locals stay in registers and on the stack, where the
// general loop's list bookkeeping and closure reloaded them around every
// PostSend (a sixth of an 8-byte WRITE's instructions); what the run
// still owes once it stops (the last signaled request of a timed run) is
// the general loop's.
func (k *bwQP) postEach(c *Config, depth, mod int, timed bool, stop *bool, moved *int, look func() error) error {
	end := k.done + depth
	last := -1 // the run's last request: signaled
	if !timed {
		end = min(end, c.Iters)
		last = c.Iters - 1
	}
	// sigAt is the next request to signal: a count, not p%mod (a division
	// per request was a twentieth of an 8-byte WRITE's cost).
	p := k.posted
	sigAt := p + max(mod-k.unsig-1, 0)
	if last >= p {
		sigAt = min(sigAt, last)
	}
	qp, wr := k.qp, (*[1]verbs.SendWR)(k.wr)
	flags := wr[0].Flags &^ verbs.SendSignaled
	sig := k.lastSig
	sigTo := k.sigTo
	for p < end && !*stop {
		wr[0].WRID, wr[0].Flags = uint64(p), flags
		if sig = p == sigAt; sig {
			wr[0].Flags = flags | verbs.SendSignaled
			sigTo = p + 1
			sigAt = p + mod
			if last >= p {
				sigAt = min(sigAt, last)
			}
		}
		if err := qp.PostSend(wr[:]); err != nil {
			k.setPosted(p, sigAt, mod, sig, sigTo)
			return err
		}
		p++
		if *moved += c.Size; *moved >= lookBytes {
			k.setPosted(p, sigAt, mod, sig, sigTo)
			if err := look(); err != nil {
				return err
			}
		}
	}
	k.setPosted(p, sigAt, mod, sig, sigTo)
	return nil
}

// setPosted records postEach's progress: p requests posted, the next
// signaled one sigAt (as the count of unsignaled ones the general loop
// keeps), the last one signaled or not, and sigTo (bwQP.sigTo).
func (k *bwQP) setPosted(p, sigAt, mod int, sig bool, sigTo int) {
	k.posted, k.unsig, k.lastSig, k.sigTo = p, max(mod-1-(sigAt-p), 0), sig, sigTo
}

// deadlineClock is what a timed run's deadline is checked against (a test
// replaces it to see when the deadline is checked).
var deadlineClock = time.Now

// bandwidth keeps up to the send queue depth of work requests in flight on
// every QP, round-robin from this goroutine, and counts the bytes of the
// completions.
func bandwidth(ctx context.Context, c *Config, ks []*bwQP, res Result) (Result, error) {
	wc := make([]verbs.WC, 64)
	timed := c.Duration > 0
	deadline := time.Now().Add(c.Duration)
	stop := false
	mayPost := func(k *bwQP) bool { return !stop && (timed || k.posted < c.Iters) }
	// completions per twentieth of the run, for the peak
	var marks []time.Duration
	step := max(c.Iters*len(ks)/20, 1)
	nextMark := step // the completion count of the next mark
	start := time.Now()
	last := start
	total := 0
	// The clock is read (for the deadline, the context and progress) every
	// 256 rounds and whenever lookBytes have been posted since the last
	// read: one round can move a whole send queue of large messages, and
	// at 8 MiB 256 rounds took over a minute. Reading it every round would
	// cost small messages their rate.
	moved := 0
	look := func() error {
		moved = 0
		now := time.Now()
		if timed && deadlineClock().After(deadline) {
			stop = true
		}
		if c.Progress != nil && now.Sub(last) >= 200*time.Millisecond {
			last = now
			p := Progress{Test: c.Test, Done: total, Elapsed: now.Sub(start), Bytes: int64(total) * int64(c.Size)}
			if !timed {
				p.Total = c.Iters * len(ks)
			}
			c.Progress(p)
		}
		return ctx.Err()
	}
	ev := ks[0].ev
	for i := 0; ; i++ {
		busy := false
		// Event mode: a round that neither posted nor completed anything
		// blocks, if every QP waits for the completion of a signaled
		// request (not for a receiver's credit, which comes as a WRITE
		// and raises no event here).
		idle := ev != nil
		for _, k := range ks {
			depth := c.TxDepth
			if k.depth > 0 {
				depth = min(depth, k.depth)
			}
			mod := max(1, min(c.CQMod, depth))
			before := k.posted
			if len(k.wr) == 1 && k.credit == nil {
				if err := k.postEach(c, depth, mod, timed, &stop, &moved, look); err != nil {
					return res, err
				}
			}
			for k.posted-k.done < depth && (mayPost(k) || !k.lastSig && k.posted > k.done) {
				// A list of up to PostList requests, each as if posted
				// alone.
				m := 0
				for m < len(k.wr) && k.posted+m-k.done < depth {
					p := k.posted + m
					more := !stop && (timed || p < c.Iters) // mayPost, at p
					if !more && m > 0 {
						break // the list's last request was the run's last, signaled
					}
					if k.credit != nil && uint32(p+1)-load32(k.credit) >= uint32(k.rxDepth) {
						break
					}
					// Every mod-th request is signaled, and the last one:
					// of the run, or (a timed run that stopped) one more,
					// so that a completion accounts for every request
					// posted. (A count, not p%mod: a division per request
					// was a twentieth of an 8-byte WRITE's cost.)
					sig := k.unsig+1 >= mod || !more || !timed && p+1 == c.Iters
					k.unsig++
					if sig {
						k.unsig = 0
					}
					w := &k.wr[m]
					w.WRID = uint64(p)
					w.Flags &^= verbs.SendSignaled
					if sig {
						w.Flags |= verbs.SendSignaled
					}
					k.lastSig = sig
					if sig {
						k.sigTo = p + 1
					}
					m++
				}
				if m == 0 {
					break
				}
				if err := k.qp.PostSend(k.wr[:m]); err != nil {
					return res, err
				}
				k.posted += m
				if moved += m * c.Size; moved >= lookBytes {
					if err := look(); err != nil {
						return res, err
					}
				}
			}
			n, err := k.scq.Poll(wc)
			if err != nil {
				return res, err
			}
			covered := k.done
			for _, w := range wc[:n] {
				if err := w.Err(); err != nil {
					return res, err
				}
				covered = max(covered, int(w.WRID)+1) // a completion accounts for the requests before it
			}
			if total+covered-k.done >= nextMark {
				now := time.Since(start)
				for ; nextMark <= total+covered-k.done; nextMark += step {
					marks = append(marks, now)
				}
			}
			total += covered - k.done
			k.done = covered
			busy = busy || mayPost(k) || k.done < k.posted
			// This QP waits for an event if a signaled request is
			// outstanding and no more may be posted, or if it is done.
			if idle && (n > 0 || k.posted != before ||
				k.sigTo <= k.done && k.posted > k.done ||
				k.posted-k.done < depth && mayPost(k)) {
				idle = false
			}
		}
		if !busy {
			break
		}
		if idle {
			if err := ev.block(ctx); err != nil {
				return res, err
			}
		}
		if i&0xff == 0 || moved >= lookBytes {
			if err := look(); err != nil {
				return res, err
			}
		}
	}
	el := time.Since(start)
	res.Iters = total
	res.Events = ev.count()
	res.AvgMBs = float64(total) * float64(c.Size) / el.Seconds() / 1e6
	res.MsgRate = float64(total) / el.Seconds() / 1e6
	res.PeakMBs = res.AvgMBs
	// The peak is the best window of at least a twentieth of the run and at
	// least 5 ms: shorter windows measure how fast the socket buffers fill.
	for i := 0; i < len(marks); i++ {
		for j := i + 1; j < len(marks); j++ {
			if dt := marks[j] - marks[i]; dt >= 5*time.Millisecond {
				res.PeakMBs = max(res.PeakMBs, float64((j-i)*step)*float64(c.Size)/dt.Seconds()/1e6)
				break
			}
		}
	}
	return res, nil
}
