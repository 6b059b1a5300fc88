package perf

// The measurements of perftest's protocol (-R): what each test runs after
// the common prefix (perftest.go), in either role.

import (
	"context"
	"encoding/binary"
	"math"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// run is the test-specific part of both roles.
func (p *ptSession) run(ctx context.Context) (Result, error) {
	c := p.c
	res := Result{Test: c.Test, Bytes: c.Size, Iters: c.Iters}
	var err error
	switch c.Test {
	case "send_bw", "send_lat":
		if err = p.dests(ctx); err != nil {
			return res, err
		}
		if err = p.hands(ctx, 1); err != nil {
			return res, err
		}
		if err = p.dests(ctx); err != nil {
			return res, err
		}
		if err = p.postRecvs(); err != nil {
			return res, err
		}
		if err = p.hands(ctx, 1); err != nil {
			return res, err
		}
		if c.Test == "send_lat" {
			res, err = p.sendLat(ctx, res)
		} else if p.client {
			res, err = p.bw(ctx, res)
		} else {
			err = p.sendBWServer(ctx)
		}
		if err != nil {
			return res, err
		}
		return res, p.hands(ctx, 1)
	case "write_bw", "read_bw":
		if err = p.dests(ctx); err != nil {
			return res, err
		}
		if err = p.dests(ctx); err != nil {
			return res, err
		}
		if err = p.hands(ctx, 1); err != nil {
			return res, err
		}
		if !p.client {
			p.comm.busy = p.dataCQs()
			if err = p.hands(ctx, 1); err != nil {
				return res, err
			}
			p.comm.busy = nil
			if err = p.reports(ctx, res); err != nil {
				return res, err
			}
			return res, p.hands(ctx, 1)
		}
		if res, err = p.bw(ctx, res); err != nil {
			return res, err
		}
		if err = p.hands(ctx, 1); err != nil {
			return res, err
		}
		if err = p.reports(ctx, res); err != nil {
			return res, err
		}
		return res, p.hands(ctx, 1)
	default: // write_lat, read_lat, atomic_lat
		r, err := p.comm.xchg(ctx, p.qps[0].mine.encode())
		if err != nil {
			return res, err
		}
		if p.qps[0].rem, err = decodePTDest(r); err != nil {
			return res, err
		}
		if err = p.dests(ctx); err != nil {
			return res, err
		}
		if err = p.dests(ctx); err != nil {
			return res, err
		}
		if err = p.hands(ctx, 1); err != nil {
			return res, err
		}
		if c.Test == "write_lat" {
			return p.writeLat(ctx, res)
		}
		if !p.client {
			p.comm.busy = p.dataCQs()
			err = p.hands(ctx, 1)
			p.comm.busy = nil
			return res, err
		}
		if res, err = p.readLat(ctx, res); err != nil {
			return res, err
		}
		return res, p.hands(ctx, 1)
	}
}

func (p *ptSession) dataCQs() []*verbs.CQ {
	if p.ev != nil {
		return nil // armed, the connections progress by themselves
	}
	var cqs []*verbs.CQ
	for _, q := range p.qps {
		cqs = append(cqs, q.id.SendCQ(), q.id.RecvCQ())
	}
	return cqs
}

// reports is xchg_bw_reports: the client's figures go to the server,
// which prints them (MiB/s, as perftest counts).
func (p *ptSession) reports(ctx context.Context, r Result) error {
	be := binary.BigEndian
	mib := 1e6 / (1 << 20)
	for _, v := range []uint64{uint64(r.Bytes), uint64(r.Iters * len(p.qps)), math.Float64bits(r.PeakMBs * mib),
		math.Float64bits(r.AvgMBs * mib), math.Float64bits(r.MsgRate)} {
		if _, err := p.comm.xchg(ctx, be.AppendUint64(nil, v)); err != nil {
			return err
		}
	}
	return nil
}

// postRecvs posts the receives of send_bw (the server) and send_lat (both).
func (p *ptSession) postRecvs() error {
	if p.c.Test == "send_bw" && p.client {
		return nil
	}
	n := ptRxDepth(p.c)
	if p.c.Test == "send_lat" {
		n = min(n, 16)
	}
	for _, q := range p.qps {
		wr := []verbs.RecvWR{{SGList: []verbs.SGE{q.mr.SGE(q.b, p.c.Size)}}}
		for range n {
			if err := q.id.QP().PostRecv(wr); err != nil {
				return err
			}
		}
	}
	return nil
}

// sendBWServer is run_iter_bw_server, with receiver credits over iWARP.
func (p *ptSession) sendBWServer(ctx context.Context) error {
	c := p.c
	rx := ptRxDepth(c)
	creditEvery := max(rx/3, 1)
	wc := make([]verbs.WC, 64)
	got := make([]int, len(p.qps))
	posted := make([]int, len(p.qps))
	inflight := make([]int, len(p.qps))
	for i := range posted {
		posted[i] = rx
	}
	total := 0
	lastShow := time.Now()
	start := lastShow
	for total < c.Iters*len(p.qps) {
		progressed := false
		for i, q := range p.qps {
			n, err := q.id.RecvCQ().Poll(wc)
			if err != nil {
				return err
			}
			for _, w := range wc[:n] {
				if err := w.Err(); err != nil {
					return err
				}
				got[i]++
				total++
				progressed = true
				if posted[i] < c.Iters {
					if err := q.id.QP().PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{q.mr.SGE(q.b, c.Size)}}}); err != nil {
						return err
					}
					posted[i]++
				}
				if p.credit && (got[i]%rx)%creditEvery == 0 {
					for inflight[i] >= c.TxDepth {
						if err := p.ev.one(ctx, q.id.SendCQ(), wc); err != nil {
							return err
						}
						inflight[i]--
					}
					binary.LittleEndian.PutUint32(q.buf[0:4], uint32(got[i]))
					err := q.id.QP().PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
						SGList: []verbs.SGE{q.mr.SGE(0, 4)}, RemoteAddr: q.rem.VAddr, RKey: q.rem.RKey}})
					if err != nil {
						return err
					}
					inflight[i]++
				}
			}
			m, err := q.id.SendCQ().Poll(wc)
			if err != nil {
				return err
			}
			for _, w := range wc[:m] {
				if err := w.Err(); err != nil {
					return err
				}
				inflight[i]--
			}
		}
		if !progressed {
			if p.ev != nil {
				if err := p.ev.block(ctx); err != nil {
					return err
				}
			} else if ctx.Err() != nil {
				return ctx.Err()
			}
			if c.Progress != nil && time.Since(lastShow) > 200*time.Millisecond {
				lastShow = time.Now()
				c.Progress(Progress{Test: c.Test, Done: total, Total: c.Iters * len(p.qps), Elapsed: lastShow.Sub(start)})
			}
		}
	}
	return nil
}

// bw is the client's bandwidth run over every data QP.
func (p *ptSession) bw(ctx context.Context, res Result) (Result, error) {
	ks := make([]*bwQP, len(p.qps))
	op := verbs.WRRDMAWrite
	switch p.c.Test {
	case "send_bw":
		op = verbs.WRSend
	case "read_bw":
		op = verbs.WRRDMARead
	}
	for i, q := range p.qps {
		k := &bwQP{qp: q.id.QP(), scq: q.id.SendCQ(), ev: p.ev}
		k.wr = []verbs.SendWR{{Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{q.mr.SGE(0, p.c.Size)}}}
		if op != verbs.WRSend {
			k.wr[0].RemoteAddr, k.wr[0].RKey = q.rem.VAddr, q.rem.RKey
		}
		if op == verbs.WRRDMARead {
			k.depth = ptOutReads
		}
		if p.credit {
			k.credit = q.buf[2*q.b : 2*q.b+4]
			k.rxDepth = ptRxDepth(p.c)
		}
		ks[i] = k
	}
	return bandwidth(ctx, p.c, ks, res)
}

// sendLat is run_iter_lat_send: the client sends first.
func (p *ptSession) sendLat(ctx context.Context, res Result) (Result, error) {
	q := p.qps[0]
	c := p.c
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{q.mr.SGE(0, c.Size)}}}
	if c.Size <= 64 {
		send[0].Flags |= verbs.SendInline
	}
	recv := []verbs.RecvWR{{SGList: []verbs.SGE{q.mr.SGE(q.b, c.Size)}}}
	wc := make([]verbs.WC, 4)
	l := newLaps(c.Iters)
	start := time.Now()
	for i := range c.Iters {
		if !p.client || i > 0 {
			if err := p.ev.one(ctx, q.id.RecvCQ(), wc); err != nil {
				return res, err
			}
			if err := q.id.QP().PostRecv(recv); err != nil {
				return res, err
			}
		}
		if err := q.id.QP().PostSend(send); err != nil {
			return res, err
		}
		l.stamp() // after the post: see laps
		if err := p.ev.one(ctx, q.id.SendCQ(), wc); err != nil {
			return res, err
		}
		p.c.progress(i+1, start)
	}
	if p.client {
		if err := p.ev.one(ctx, q.id.RecvCQ(), wc); err != nil {
			return res, err
		}
		l.stamp()
	}
	summarize(&res, l.samples(2))
	return res, nil
}

// writeLat is run_iter_lat_write: the server writes first; the last byte
// of each message carries the iteration number.
func (p *ptSession) writeLat(ctx context.Context, res Result) (Result, error) {
	q := p.qps[0]
	c := p.c
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{q.mr.SGE(0, c.Size)},
		RemoteAddr: q.rem.VAddr, RKey: q.rem.RKey}}
	if c.Size <= 64 {
		wr[0].Flags |= verbs.SendInline
	}
	post := q.buf[c.Size-1 : c.Size]
	poll := q.buf[q.b+c.Size-1:]
	wc := make([]verbs.WC, 4)
	wait := func(want byte) error {
		// The poll of the CQ progresses the connection, in event mode
		// too (see side.writePingPong); it takes nothing: the WRITE's
		// own completion was waited for after its post.
		for k := 0; load8(poll) != want; k++ {
			q.id.SendCQ().Poll(wc)
			if k&0xfff == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	}
	l := newLaps(c.Iters)
	start := time.Now()
	for i := 1; i <= c.Iters; i++ {
		// The client waits for write i before its own; the server writes
		// first and then waits for the client's previous one.
		want := byte(i)
		if !p.client {
			want = byte(i - 1)
		}
		if p.client || i > 1 {
			if err := wait(want); err != nil {
				return res, err
			}
		}
		post[0] = byte(i)
		if err := q.id.QP().PostSend(wr); err != nil {
			return res, err
		}
		l.stamp() // after the post: see laps
		if err := p.ev.one(ctx, q.id.SendCQ(), wc); err != nil {
			return res, err
		}
		p.c.progress(i, start)
	}
	if !p.client {
		if err := wait(byte(c.Iters)); err != nil {
			return res, err
		}
	}
	summarize(&res, l.samples(2))
	return res, nil
}

// readLat is run_iter_lat for READ and ATOMIC (fetch-and-add, perftest's
// default): one at a time, each timed.
func (p *ptSession) readLat(ctx context.Context, res Result) (Result, error) {
	q := p.qps[0]
	c := p.c
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{q.mr.SGE(0, c.Size)},
		RemoteAddr: q.rem.VAddr, RKey: q.rem.RKey}}
	if c.Test == "atomic_lat" {
		wr[0].Opcode, wr[0].CompareAdd = verbs.WRAtomicFetchAndAdd, 1
	}
	wc := make([]verbs.WC, 4)
	d := samples[time.Duration](c.Iters)
	start := time.Now()
	for i := range c.Iters {
		t0 := time.Now()
		if err := q.id.QP().PostSend(wr); err != nil {
			return res, err
		}
		if err := p.ev.one(ctx, q.id.SendCQ(), wc); err != nil {
			return res, err
		}
		d = append(d, time.Since(t0))
		p.c.progress(i+1, start)
	}
	summarize(&res, d)
	return res, nil
}
