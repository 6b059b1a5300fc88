package perf

// perftest's own protocol over rdma_cm (ib_send_bw -R and friends), so that
// goverbs perf -R runs against perftest in either role. The facts come from
// perftest 6.06 (Debian 12's perftest 4.5+0.17, linux-rdma/perftest tag
// v4.5-0.17: perftest_communication.c, perftest_resources.c and the test
// mains):
//
//   - Two kinds of rdma_cm connection to the same port. First a control
//     connection ("comm"): an RC QP with one 56-byte receive posted before
//     connect/accept, no private data, IRD = ORD = 0. Every exchange on it is
//     one SEND each way: the client sends first and then receives, the
//     server receives first, reposts its receive and then sends.
//   - On comm, in order: the version string (16 bytes, "6.06"; perftest
//     refuses peers older than 5.70), the cycle buffer and cache line sizes
//     (4-byte big-endian ints; both sides take the larger), the MTU (2
//     bytes, a decimal ibv_mtu and a NUL), then one handshake.
//   - A handshake exchanges a struct pingpong_dest (56 bytes, fields
//     big-endian: lid, out_reads, qpn, psn, rkey, 4 bytes of padding, vaddr,
//     gid[16], srqn, gid_index).
//   - The data connections: the client connects QPs more times to the same
//     port (no private data; IRD = ORD = out_reads for READ, else 0) and
//     retries a refused connect 10 times, 100 ms apart; the server listens
//     again for them. Then one more handshake.
//   - Each test then runs a fixed sequence of handshakes (the first ones
//     carry each QP's buffer address and rkey), the measurement on the data
//     QPs, and for write_bw/read_bw an exchange of the client's report (size
//     and iterations as 8-byte big-endian integers; peak and average MiB/s
//     and the message rate in Mpps as big-endian doubles).
//   - ib_send_bw over iWARP adds receiver credits (no RNR retry on iWARP):
//     each side advertises a 4-byte credit word instead of its buffer; the
//     receiver RDMA-WRITEs its receive count (host order, little-endian
//     here) there every rx_depth/3 receives, and the sender keeps fewer than
//     rx_depth sends beyond the last credit. rx_depth is 512, or the
//     iterations when fewer (rounded up to even), on both sides: like
//     perftest, both ends must be given the same -n.
//   - write_lat: each side writes its message into the peer's buffer, the
//     last byte carrying the iteration number (mod 256), and spins on the
//     last byte of its own buffer. The server writes first.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

const (
	ptVersion     = "6.06" // the perftest protocol spoken
	ptMinVersion  = 5.70   // perftest's own floor (check_version_compatibility)
	ptDestLen     = 56     // sizeof(struct pingpong_dest)
	ptSyncID      = 5      // SYNC_SPEC_ID, the wr_id perftest checks on comm
	ptCycle       = 4096   // our cycle buffer (page size)
	ptCacheLine   = 64
	ptMTU         = "3" // IBV_MTU_1024, what siw reports on a 1500-byte link
	ptOutReads    = 128 // perftest's default: the device maximum (siw: 128)
	ptRxDepthSend = 512 // DEF_RX_SEND
)

// ptDest is perftest's struct pingpong_dest.
type ptDest struct {
	LID, OutReads, QPN, PSN, RKey uint32
	VAddr                         uint64
	GID                           [16]byte
	SRQN, GIDIndex                uint32
}

func (d *ptDest) encode() []byte {
	b := make([]byte, ptDestLen)
	be := binary.BigEndian
	be.PutUint32(b[0:], d.LID)
	be.PutUint32(b[4:], d.OutReads)
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	be.PutUint32(b[48:], d.SRQN)
	be.PutUint32(b[52:], d.GIDIndex)
	return b
}

func decodePTDest(b []byte) (ptDest, error) {
	if len(b) < ptDestLen {
		return ptDest{}, fmt.Errorf("perf: perftest handshake of %d bytes, want %d", len(b), ptDestLen)
	}
	be := binary.BigEndian
	d := ptDest{LID: be.Uint32(b), OutReads: be.Uint32(b[4:]), QPN: be.Uint32(b[8:]), PSN: be.Uint32(b[12:]),
		RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:]), SRQN: be.Uint32(b[48:]), GIDIndex: be.Uint32(b[52:])}
	copy(d.GID[:], b[32:48])
	return d, nil
}

// ptComm is perftest's control connection.
type ptComm struct {
	id     *rdmacm.ID
	mr     *verbs.MR
	client bool
	wc     []verbs.WC
	// busy, when set, is busy-polled while waiting (the data CQs of a
	// passive side, whose polled-mode progress comes from polling).
	busy []*verbs.CQ
}

func newPTComm(id *rdmacm.ID, client bool) (*ptComm, error) {
	m := &ptComm{id: id, client: client, wc: make([]verbs.WC, 16)}
	if err := id.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	var err error
	if m.mr, err = id.PD().RegMR(make([]byte, 2*64), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	return m, m.postRecv()
}

func (m *ptComm) close() {
	m.id.Close()
	if m.mr != nil {
		m.mr.Dereg()
	}
}

// linger waits up to d for the peer to close the control connection.
// perftest closes its end as it exits; tearing ours down first can fail
// its last SEND (siw then reports IBV_WC_LOC_QP_OP_ERR on it, as seen in
// the vmlab after read tests).
func (m *ptComm) linger(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.id.Done():
	case <-t.C:
	case <-ctx.Done():
	}
}

func (m *ptComm) postRecv() error {
	return m.id.QP().PostRecv([]verbs.RecvWR{{WRID: ptSyncID, SGList: []verbs.SGE{m.mr.SGE(0, ptDestLen)}}})
}

// wait returns the next completion of cq.
func (m *ptComm) wait(ctx context.Context, cq *verbs.CQ) (verbs.WC, error) {
	for i := 0; ; i++ {
		n, err := cq.Poll(m.wc[:1])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			w := m.wc[0]
			if err := w.Err(); err != nil {
				return w, fmt.Errorf("perf: perftest control connection: %w", err)
			}
			if w.WRID != ptSyncID {
				return w, fmt.Errorf("perf: perftest control connection: completion of wr_id %d", w.WRID)
			}
			return w, nil
		}
		if len(m.busy) == 0 {
			if err := cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
			continue
		}
		for _, b := range m.busy {
			b.Poll(m.wc[1:])
		}
		if i&0x3ff == 0 && ctx.Err() != nil {
			return verbs.WC{}, ctx.Err()
		}
	}
}

func (m *ptComm) send(ctx context.Context, b []byte) error {
	copy(m.mr.Bytes()[64:], b)
	err := m.id.QP().PostSend([]verbs.SendWR{{WRID: ptSyncID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{m.mr.SGE(64, len(b))}}})
	if err != nil {
		return err
	}
	_, err = m.wait(ctx, m.id.SendCQ())
	return err
}

func (m *ptComm) recv(ctx context.Context) ([]byte, error) {
	w, err := m.wait(ctx, m.id.RecvCQ())
	if err != nil {
		return nil, err
	}
	b := append([]byte(nil), m.mr.Bytes()[:min(int(w.ByteLen), ptDestLen)]...)
	return b, m.postRecv()
}

// xchg is ctx_xchg_data / ctx_hand_shake: the client writes then reads, the
// server reads then writes.
func (m *ptComm) xchg(ctx context.Context, mine []byte) ([]byte, error) {
	if m.client {
		if err := m.send(ctx, mine); err != nil {
			return nil, err
		}
		return m.recv(ctx)
	}
	theirs, err := m.recv(ctx)
	if err != nil {
		return nil, err
	}
	return theirs, m.send(ctx, mine)
}

// ptQP is one data QP with its buffer: [0,B) is the local source, [B,2B)
// the region the peer writes or reads, [2B,2B+8) the credit word.
type ptQP struct {
	id   *rdmacm.ID
	mr   *verbs.MR
	buf  []byte
	b    int
	mine ptDest
	rem  ptDest
}

// ptSession is one perftest run, either role.
type ptSession struct {
	c      *Config
	comm   *ptComm
	qps    []*ptQP
	cycle  int
	client bool
	credit bool // send_bw: receiver credits (iWARP)
	// ev is the event mode of the data QPs (nil: polled); the control
	// connection waits as before.
	ev *events
}

func (p *ptSession) close() {
	for _, q := range p.qps {
		if q.id != nil {
			q.id.Close()
		}
		if q.mr != nil {
			q.mr.Dereg()
		}
	}
	if p.comm != nil {
		p.comm.close()
	}
	p.ev.close()
}

func ptQPAttr(c *Config) verbs.QPInitAttr {
	return verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: c.TxDepth + 2, MaxRecvWR: ptRxDepth(c) + 2,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
}

// ptRxDepth is perftest's rx_depth for the test.
func ptRxDepth(c *Config) int {
	if c.Test != "send_bw" && c.Test != "send_lat" {
		return 1
	}
	d := min(ptRxDepthSend, c.Iters)
	if d%2 == 1 {
		d++
	}
	return d
}

func ptConnParam(c *Config) *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{}
	if c.Test == "read_bw" || c.Test == "read_lat" || c.Test == "atomic_lat" {
		p.ResponderResources, p.InitiatorDepth = ptOutReads, ptOutReads
	}
	return p
}

// setup registers a data QP's buffer and fills in its pingpong_dest.
func (p *ptSession) setup(q *ptQP) error {
	q.b = (max(p.c.Size, p.cycle) + 63) &^ 63
	q.buf = make([]byte, 2*q.b+64)
	var err error
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if p.c.Test == "atomic_lat" {
		access |= verbs.AccessRemoteAtomic
	}
	q.mr, err = q.id.PD().RegMR(q.buf, access)
	if err != nil {
		return err
	}
	q.mine = ptDest{QPN: q.id.QP().Num(), PSN: uint32(time.Now().UnixNano()) & 0xffffff, RKey: q.mr.RKey(),
		VAddr: q.mr.RemoteAddr(q.b)}
	if p.c.Test == "read_bw" || p.c.Test == "read_lat" || p.c.Test == "atomic_lat" {
		q.mine.OutReads = ptOutReads
	} else {
		q.mine.OutReads = 1
	}
	if p.credit {
		q.mine.VAddr = q.mr.RemoteAddr(2 * q.b)
	}
	return nil
}

// prefix runs what every test starts with: versions, system data, MTU,
// the data connections between two handshakes.
func (p *ptSession) prefix(ctx context.Context, ln *rdmacm.ID, addr string) error {
	v := make([]byte, 16)
	copy(v, ptVersion)
	rv, err := p.comm.xchg(ctx, v)
	if err != nil {
		return err
	}
	rs, _, _ := strings.Cut(string(rv[:min(len(rv), 16)]), "\x00")
	var rver float64
	if _, err := fmt.Sscanf(rs, "%g", &rver); err != nil || rver < ptMinVersion {
		return fmt.Errorf("perf: the peer speaks perftest version %q; this side speaks %s (5.70 or later needed)", rs, ptVersion)
	}
	for _, mine := range []int{ptCycle, ptCacheLine} {
		b := binary.BigEndian.AppendUint32(nil, uint32(mine))
		r, err := p.comm.xchg(ctx, b)
		if err != nil {
			return err
		}
		if len(r) < 4 {
			return errors.New("perf: short perftest system data")
		}
		if mine == ptCycle {
			rc := int(binary.BigEndian.Uint32(r))
			if rc > 16<<20 {
				return fmt.Errorf("perf: the peer's cycle buffer of %d bytes is implausible (perftest uses the page size)", rc)
			}
			p.cycle = max(ptCycle, rc)
		}
	}
	if _, err := p.comm.xchg(ctx, []byte(ptMTU+"\x00")); err != nil {
		return err
	}
	// create_rdma_cm_connection: handshake, connect, handshake
	if err := p.hands(ctx, 1); err != nil {
		return err
	}
	p.qps = make([]*ptQP, p.c.QPs)
	for i := range p.qps {
		q := &ptQP{}
		p.qps[i] = q
		var err error
		if p.client {
			q.id, err = p.dial(ctx, addr)
		} else {
			q.id, err = p.accept(ctx, ln)
		}
		if err != nil {
			return fmt.Errorf("perf: data connection %d: %w", i, err)
		}
		if err := p.setup(q); err != nil {
			return err
		}
	}
	return p.hands(ctx, 1)
}

func (p *ptSession) dial(ctx context.Context, addr string) (*rdmacm.ID, error) {
	var last error
	for try := 0; try < 10; try++ {
		if try > 0 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		id, err := rdmacm.CreateIDFrom(p.c.Source, addr)
		if err != nil {
			return nil, err
		}
		attr := ptQPAttr(p.c)
		if err := p.ev.attach(id.DeviceContext(), &attr); err != nil {
			id.Close()
			return nil, err
		}
		if err := id.CreateQP(nil, attr); err != nil {
			id.Close()
			return nil, err
		}
		if last = id.Connect(ctx, ptConnParam(p.c)); last == nil {
			return id, nil
		}
		id.Close()
	}
	return nil, last
}

func (p *ptSession) accept(ctx context.Context, ln *rdmacm.ID) (*rdmacm.ID, error) {
	req, err := ln.GetRequest(ctx)
	if err != nil {
		return nil, err
	}
	attr := ptQPAttr(p.c)
	if err := p.ev.attach(req.DeviceContext(), &attr); err != nil {
		req.Reject(nil)
		req.Close()
		return nil, err
	}
	if err := req.CreateQP(nil, attr); err != nil {
		req.Reject(nil)
		req.Close()
		return nil, err
	}
	if err := req.Accept(ctx, ptConnParam(p.c)); err != nil {
		req.Close()
		return nil, err
	}
	return req, nil
}

// hands runs n handshakes of QP 0's destination.
func (p *ptSession) hands(ctx context.Context, n int) error {
	var d ptDest
	if len(p.qps) > 0 && p.qps[0].mr != nil {
		d = p.qps[0].mine
	}
	for range n {
		if _, err := p.comm.xchg(ctx, d.encode()); err != nil {
			return err
		}
	}
	return nil
}

// dests exchanges every QP's destination (one handshake per QP) and
// records the peer's.
func (p *ptSession) dests(ctx context.Context) error {
	for _, q := range p.qps {
		r, err := p.comm.xchg(ctx, q.mine.encode())
		if err != nil {
			return err
		}
		if q.rem, err = decodePTDest(r); err != nil {
			return err
		}
	}
	return nil
}

// ptBegin connects the control connection and runs the common prefix.
func ptBegin(ctx context.Context, c *Config, ln *rdmacm.ID, addr string) (*ptSession, error) {
	p := &ptSession{c: c, client: ln == nil, cycle: ptCycle, ev: newEvents(c)}
	var id *rdmacm.ID
	var err error
	if p.client {
		if id, err = rdmacm.CreateIDFrom(c.Source, addr); err != nil {
			return nil, err
		}
		if p.comm, err = newPTComm(id, true); err != nil {
			id.Close()
			return nil, err
		}
		if err := id.Connect(ctx, &rdmacm.ConnParam{}); err != nil {
			p.close()
			return nil, err
		}
	} else {
		if id, err = ln.GetRequest(ctx); err != nil {
			return nil, err
		}
		if p.comm, err = newPTComm(id, false); err != nil {
			id.Reject(nil)
			id.Close()
			return nil, err
		}
		if err := id.Accept(ctx, &rdmacm.ConnParam{}); err != nil {
			p.close()
			return nil, err
		}
	}
	// perftest counts receiver credits only over iWARP, which has no RNR
	// retry; over IB and RoCE a sender that finds no receive waits.
	p.credit = c.Test == "send_bw" && id.DeviceContext().Device().TransportType() == verbs.TransportIWARP
	if err := p.prefix(ctx, ln, addr); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// RunPerftest is the client of perftest's protocol (-R): it connects to
// a perftest server (ib_*_bw/lat -R) or a goverbs perf -R server at addr,
// measures and returns the result.
func RunPerftest(ctx context.Context, addr string, c Config) (Result, error) {
	if err := c.checkPerftest(); err != nil {
		return Result{}, err
	}
	p, err := ptBegin(ctx, &c, nil, addr)
	if err != nil {
		return Result{}, err
	}
	defer p.close()
	r, err := p.run(ctx)
	if err != nil {
		return r, err
	}
	r.Device = p.comm.id.DeviceContext().Device().Name()
	r.Events = p.ev.count()
	p.comm.linger(ctx, 200*time.Millisecond)
	for _, q := range p.qps {
		q.id.Disconnect()
	}
	p.comm.id.Disconnect()
	return r, nil
}

// ServePerftest is the server of perftest's protocol (-R): it serves one
// client (ib_*_bw/lat -R or goverbs perf -R) on the listener ln. Like
// perftest's server it takes the test's parameters from its own Config.
func ServePerftest(ctx context.Context, ln *rdmacm.ID, c Config) error {
	if err := c.checkPerftest(); err != nil {
		return err
	}
	p, err := ptBegin(ctx, &c, ln, "")
	if err != nil {
		return err
	}
	defer p.close()
	if _, err = p.run(ctx); err != nil {
		return err
	}
	p.comm.linger(ctx, 5*time.Second)
	return nil
}

func (c *Config) checkPerftest() error {
	if err := c.Check(); err != nil {
		return err
	}
	if c.Duration > 0 {
		return errors.New("perf: -D is not supported with -R")
	}
	if c.lat() && c.QPs > 1 {
		return errors.New("perf: latency tests use one QP")
	}
	return nil
}
