package rpma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// ConnEvent is a connection event (enum rpma_conn_event).
type ConnEvent int

// Connection events, with librpma's values.
const (
	ConnUndefined   ConnEvent = -1
	ConnEstablished ConnEvent = 0 // the connection is made
	ConnClosed      ConnEvent = 1 // the connection was closed (by either side)
	ConnLost        ConnEvent = 2 // the connection was lost (an error, a dead peer)
	ConnRejected    ConnEvent = 3 // the server rejected the request
	ConnUnreachable ConnEvent = 4 // the server could not be reached
)

var connEventNames = [...]string{"RPMA_CONN_ESTABLISHED", "RPMA_CONN_CLOSED", "RPMA_CONN_LOST", "RPMA_CONN_REJECTED", "RPMA_CONN_UNREACHABLE"}

// String returns the text rpma_utils_conn_event_2str gives.
func (e ConnEvent) String() string {
	if e >= 0 && int(e) < len(connEventNames) {
		return connEventNames[e]
	}
	return "RPMA_CONN_UNDEFINED"
}

// CompletionFlags say when an operation generates a completion
// (RPMA_F_COMPLETION_*).
type CompletionFlags int

const (
	// CompletionOnError: a completion only if the operation fails.
	CompletionOnError CompletionFlags = 1 << 0
	// CompletionAlways: a completion when the operation ends, success or not.
	CompletionAlways CompletionFlags = 1<<1 | CompletionOnError
)

func (f CompletionFlags) send() (verbs.SendFlags, error) {
	switch f {
	case CompletionOnError:
		return 0, nil
	case CompletionAlways:
		return verbs.SendSignaled, nil
	}
	return 0, wrap(ErrInval, "completion flags %#x", int(f))
}

// FlushType is the guarantee a flush gives (enum rpma_flush_type).
type FlushType int

const (
	// FlushPersistent: the data written before is durable at the target.
	FlushPersistent FlushType = 0
	// FlushVisibility: the data written before is visible to the target's CPU.
	FlushVisibility FlushType = 1
)

// String names the flush type.
func (t FlushType) String() string {
	switch t {
	case FlushPersistent:
		return "PERSISTENT"
	case FlushVisibility:
		return "VISIBILITY"
	}
	return fmt.Sprintf("FlushType(%d)", int(t))
}

// Conn is a connection (struct rpma_conn): its events, its CQs, and the
// data path (Read, Write, WriteWithImm, AtomicWrite, Flush, Send,
// SendWithImm, Recv).
type Conn struct {
	peer     *Peer
	id       *rdmacm.ID
	qp       *verbs.QP
	cq, rcq  *CQ // rcq: the connection's own receive CQ
	srqRCQ   *CQ // the SRQ's receive CQ, when receives complete there
	ch       *verbs.CompChannel
	srq      *SRQ
	rejectPD []byte
	connErr  error // why an active connect failed (ConnectError)

	raw *verbs.MR // 8 bytes, the sink of read-after-write flushes

	// flushNative and awNative are 0 while unknown, 1 when FLUSH
	// (ATOMIC_WRITE) is native, -1 when it falls back to librpma's method.
	flushNative, awNative atomic.Int32

	remote atomic.Pointer[PeerCfg]
	// remoteSet says ApplyRemotePeerCfg was called (remote is otherwise
	// a default configuration), for Flush's error.
	remoteSet atomic.Bool

	events chan ConnEvent
	note   *notifier
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func newConn(r *ConnReq) (*Conn, error) {
	c := &Conn{peer: r.peer, id: r.id, qp: r.id.QP(), cq: r.cq, rcq: r.rcq, ch: r.ch, srq: r.srq, events: make(chan ConnEvent, 16)}
	if r.srq != nil && r.srq.rcq != nil {
		c.srqRCQ = r.srq.rcq
	}
	var err error
	if c.note, err = newNotifier(); err != nil {
		return nil, err
	}
	c.raw, err = r.peer.pd.RegMR(make([]byte, 8), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		c.note.close()
		return nil, provider("ibv_reg_mr", err)
	}
	c.remote.Store(NewPeerCfg())
	if !r.cfg.Extensions() && isRoCE(r.peer.ctx) {
		// Nothing on an IB wire negotiates FLUSH and ATOMIC_WRITE (IBA
		// 1.5), and a peer without them ends the connection on the first
		// one: with the extensions off, use librpma's fallbacks from the
		// start.
		c.flushNative.Store(-1)
		c.awNative.Store(-1)
	}
	// A device without them: librpma's fallbacks from the start, as
	// librpma picks them when it creates the connection.
	if !r.peer.nativeFlush {
		c.flushNative.Store(-1)
	}
	if !r.peer.nativeAtomicWrite {
		c.awNative.Store(-1)
	}
	return c, nil
}

// isRoCE reports whether ctx's device is RoCE: the IB transport on an
// Ethernet link, as libibverbs applications tell it.
func isRoCE(ctx *verbs.Context) bool {
	if ctx.Device().TransportType() != verbs.TransportIB {
		return false
	}
	pa, err := ctx.QueryPort(1)
	return err == nil && pa.LinkLayer == verbs.LinkLayerEthernet
}

// start runs the goroutine that turns the identifier's events into
// connection events.
func (c *Conn) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			ev, err := c.id.NextEvent(ctx)
			if err != nil {
				return
			}
			var ce ConnEvent
			switch ev.Type {
			case rdmacm.EventEstablished:
				ce = ConnEstablished
			case rdmacm.EventRejected:
				ce = ConnRejected
			case rdmacm.EventUnreachable, rdmacm.EventConnectError:
				ce = ConnUnreachable
			case rdmacm.EventDisconnected:
				ce = ConnClosed
				if ev.Err != nil && !errors.Is(ev.Err, rdmacm.ErrDisconnected) && !errors.Is(ev.Err, rdmacm.ErrLocalDisconnect) {
					ce = ConnLost
					logAt(LogWarning, "connection lost", "err", ev.Err)
				}
			default:
				continue
			}
			// Counted before the hand-over: a NextEvent that takes the
			// event at once must find it counted (its take would be lost,
			// and the fd left readable with nothing pending).
			c.note.add()
			select {
			case c.events <- ce:
			case <-ctx.Done():
				c.note.take()
				return
			}
		}
	}()
}

// readyToReceive sends, from the active side, a zero-length RDMA Write
// (STag 1, offset 0: the form of RFC 6581's Write RTR, which iWARP
// receivers accept without a check). An MPA responder may transmit only
// after the initiator's first message, and in librpma's model the passive
// side may well be the first to act (the server reads the client's memory
// at once, as in example 03); this message lets it. It completes at once
// and, being unsignaled, produces no completion.
func (c *Conn) readyToReceive() {
	wr := [1]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, RKey: 1}}
	if err := c.qp.PostSend(wr[:]); err != nil {
		logAt(LogWarning, "ready-to-receive message", "err", err)
	}
}

// NextEvent waits for the connection's next event (rpma_conn_next_event).
// It returns ErrNoEvent, wrapping ctx's error, when ctx ends first, and
// ErrInval for a nil connection.
func (c *Conn) NextEvent(ctx context.Context) (ConnEvent, error) {
	if c == nil {
		return ConnUndefined, wrap(ErrInval, "nil connection")
	}
	select {
	case ev := <-c.events:
		c.note.take()
		logAt(LogInfo, "connection event", "event", ev)
		return ev, nil
	case <-ctx.Done():
		return ConnUndefined, fmt.Errorf("rpma: %w: %w", ErrNoEvent, ctx.Err())
	}
}

// EventFd returns a file descriptor that is readable while NextEvent would
// not block (rpma_conn_get_event_fd).
func (c *Conn) EventFd() int { return c.note.fd() }

// PrivateData returns the other side's private data
// (rpma_conn_get_private_data): of its accept on the active side (or of
// its rejection), of its request on the passive side.
func (c *Conn) PrivateData() []byte {
	if c.rejectPD != nil {
		return c.rejectPD
	}
	return c.id.PrivateData()
}

// ConnectError returns why the connection was not made, on the active
// side, or nil: a *rdmacm.RejectedError when the server rejected it, or
// when nobody listens (errors.Is syscall.ECONNREFUSED), or an error
// wrapping rdmacm.ErrUnreachable when the server did not answer. librpma
// reports all of these as the event ConnRejected or ConnUnreachable
// alone; this tells a refused connection from a rejected one.
func (c *Conn) ConnectError() error { return c.connErr }

// ApplyRemotePeerCfg records the remote peer's configuration
// (rpma_conn_apply_remote_peer_cfg), usually received as a descriptor:
// whether it declares direct write to persistent memory decides whether
// FlushPersistent is allowed. It returns ErrInval for a nil configuration.
func (c *Conn) ApplyRemotePeerCfg(cfg *PeerCfg) error {
	if c == nil || cfg == nil {
		return wrap(ErrInval, "nil connection or configuration")
	}
	cp := *cfg
	c.remote.Store(&cp)
	c.remoteSet.Store(true)
	return nil
}

// QPNum returns the number of the connection's QP (rpma_conn_get_qp_num).
func (c *Conn) QPNum() uint32 { return c.qp.Num() }

// QP returns the connection's verbs QP.
func (c *Conn) QP() *verbs.QP { return c.qp }

// CQ returns the connection's main CQ (rpma_conn_get_cq).
func (c *Conn) CQ() *CQ { return c.cq }

// RCQ returns the CQ the connection's receives complete on when it is not
// the main CQ (rpma_conn_get_rcq): the connection's receive CQ, or its SRQ's;
// nil when receives complete on the main CQ.
func (c *Conn) RCQ() *CQ {
	if c.rcq != nil {
		return c.rcq
	}
	return c.srqRCQ
}

// CompletionFd returns the file descriptor of the shared completion
// channel (rpma_conn_get_compl_fd), or ErrNotSharedChannel when each CQ has
// its own (use CQ.Fd).
func (c *Conn) CompletionFd() (int, error) {
	if c.ch == nil {
		return -1, wrap(ErrNotSharedChannel, "the connection's CQs have their own channels")
	}
	return c.ch.Fd(), nil
}

// Wait waits for a completion on either of the connection's CQs when they
// share a completion channel (rpma_conn_wait), re-arms that CQ and returns
// it, with isRCQ true when it is the receive CQ. It returns
// ErrNotSharedChannel without a shared channel, and ErrNoCompletion
// (wrapping ctx's error) when ctx ends first.
func (c *Conn) Wait(ctx context.Context) (cq *CQ, isRCQ bool, err error) {
	if c == nil {
		return nil, false, wrap(ErrInval, "nil connection")
	}
	if c.ch == nil {
		return nil, false, wrap(ErrNotSharedChannel, "the connection's CQs have their own channels")
	}
	got, err := c.ch.GetEvent(ctx)
	if err != nil {
		return nil, false, waitErr(err)
	}
	if err := rearm(c.ch, got); err != nil {
		return nil, false, err
	}
	if c.rcq != nil && got == c.rcq.cq {
		return c.rcq, true, nil
	}
	return c.cq, false, nil
}

// Disconnect starts closing the connection (rpma_conn_disconnect): both
// sides get ConnClosed, and outstanding operations complete with
// WR_FLUSH_ERR.
func (c *Conn) Disconnect() error {
	if c == nil {
		return wrap(ErrInval, "nil connection")
	}
	if err := c.id.Disconnect(); err != nil && !errors.Is(err, verbs.ErrInvalidState) {
		return provider("rdma_disconnect", err)
	}
	return nil
}

// Delete frees the connection (rpma_conn_delete): it disconnects if needed
// and destroys the QP, the CQs and the identifier.
func (c *Conn) Delete() error {
	if c == nil {
		return wrap(ErrInval, "nil connection")
	}
	var err error
	c.once.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		c.wg.Wait()
		err = c.id.Close()
		if c.cq != nil {
			c.cq.destroy()
		}
		if c.rcq != nil {
			c.rcq.destroy()
		}
		if c.ch != nil {
			c.ch.Close()
		}
		c.raw.Dereg()
		c.note.close()
	})
	if err != nil {
		return provider("rdma_destroy_id", err)
	}
	return nil
}

// post posts one send work request; read says it is an RDMA Read to be
// recorded for GetCompletion (flush: a read-after-write flush).
func (c *Conn) post(wr *verbs.SendWR, read, flush bool) error {
	one := [1]verbs.SendWR{*wr}
	var err error
	if read && wr.Flags&verbs.SendSignaled != 0 {
		// Recorded under the CQ's lock, so that a poller cannot see the
		// completion before the record.
		cq := c.cq
		cq.mu.Lock()
		cq.noteRead(flush)
		if err = c.qp.PostSend(one[:]); err != nil {
			cq.reads = cq.reads[:len(cq.reads)-1]
		}
		cq.mu.Unlock()
	} else {
		err = c.qp.PostSend(one[:])
	}
	if err != nil {
		if errors.Is(err, verbs.ErrNotSupported) {
			return fmt.Errorf("rpma: %w: ibv_post_send: %w", ErrNoSupp, err)
		}
		return provider("ibv_post_send", err)
	}
	return nil
}

// Read reads n bytes of src at srcOff into dst at dstOff (rpma_read). dst
// needs UsageReadDst, src UsageReadSrc. It returns ErrInval for bad
// arguments and ErrProvider when posting fails.
func (c *Conn) Read(dst *MR, dstOff int, src *RemoteMR, srcOff, n int, flags CompletionFlags, opCtx uint64) error {
	if c == nil || dst == nil || src == nil {
		return wrap(ErrInval, "nil connection or region")
	}
	sf, err := flags.send()
	if err != nil {
		return err
	}
	if err := checkRange("read destination", dstOff, n, uint64(dst.Size())); err != nil {
		return err
	}
	if err := checkRange("read source", srcOff, n, src.size); err != nil {
		return err
	}
	return c.post(&verbs.SendWR{WRID: opCtx, Opcode: verbs.WRRDMARead, Flags: sf,
		SGList: []verbs.SGE{dst.mr.SGE(dstOff, n)}, RemoteAddr: src.addr + uint64(srcOff), RKey: src.rkey}, true, false)
}

// Write writes n bytes of src at srcOff to dst at dstOff (rpma_write). dst
// needs UsageWriteDst. It returns ErrInval for bad arguments and
// ErrProvider when posting fails.
func (c *Conn) Write(dst *RemoteMR, dstOff int, src *MR, srcOff, n int, flags CompletionFlags, opCtx uint64) error {
	return c.write(dst, dstOff, src, srcOff, n, flags, opCtx, verbs.WRRDMAWrite, 0)
}

// WriteWithImm is Write followed by the immediate value imm, which
// completes a receive at the other side as OpRecvRDMAWithImm
// (rpma_write_with_imm). Towards a peer without immediate data (not
// goverbs, or extensions off) it returns ErrNoSupp.
func (c *Conn) WriteWithImm(dst *RemoteMR, dstOff int, src *MR, srcOff, n int, imm uint32, flags CompletionFlags, opCtx uint64) error {
	return c.write(dst, dstOff, src, srcOff, n, flags, opCtx, verbs.WRRDMAWriteWithImm, imm)
}

func (c *Conn) write(dst *RemoteMR, dstOff int, src *MR, srcOff, n int, flags CompletionFlags, opCtx uint64, op verbs.WROpcode, imm uint32) error {
	if c == nil || dst == nil || (src == nil && n > 0) {
		return wrap(ErrInval, "nil connection or region")
	}
	sf, err := flags.send()
	if err != nil {
		return err
	}
	if err := checkRange("write destination", dstOff, n, dst.size); err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: opCtx, Opcode: op, Flags: sf, ImmData: imm, RemoteAddr: dst.addr + uint64(dstOff), RKey: dst.rkey}
	if src != nil {
		if err := checkRange("write source", srcOff, n, uint64(src.Size())); err != nil {
			return err
		}
		wr.SGList = []verbs.SGE{src.mr.SGE(srcOff, n)}
	}
	return c.post(&wr, false, false)
}

// AtomicWrite writes the 8 bytes of src to dst at dstOff, which must be
// 8-byte aligned, as one atomic store at the target (rpma_write_atomic).
// Between goverbs peers with extensions, on devices that have it, this is
// the native ATOMIC_WRITE; otherwise, as librpma does without native
// support, an 8-byte inline RDMA Write fenced behind earlier reads (atomic
// on targets that place an aligned 8-byte write at once, as siw and
// goverbs do). It returns ErrInval for bad arguments.
func (c *Conn) AtomicWrite(dst *RemoteMR, dstOff int, src [8]byte, flags CompletionFlags, opCtx uint64) error {
	if c == nil || dst == nil {
		return wrap(ErrInval, "nil connection or region")
	}
	sf, err := flags.send()
	if err != nil {
		return err
	}
	if dstOff%8 != 0 {
		return wrap(ErrInval, "atomic write at offset %d (must be 8-byte aligned)", dstOff)
	}
	if err := checkRange("atomic write destination", dstOff, 8, dst.size); err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: opCtx, Opcode: verbs.WRAtomicWrite, Flags: sf | verbs.SendInline, Inline: src[:],
		RemoteAddr: dst.addr + uint64(dstOff), RKey: dst.rkey}
	if done, err := c.postNative(&c.awNative, &wr, "no native atomic write: using a fenced inline write"); done {
		return err
	}
	wr.Opcode = verbs.WRRDMAWrite
	wr.Flags |= verbs.SendFence
	return c.post(&wr, false, false)
}

// Flush makes the data written before it to dst's range [dstOff,
// dstOff+n) visible or persistent at the target (rpma_flush), and
// completes (with CompletionAlways) as OpFlush when that holds.
//
// What each type guarantees (the package doc says which case a connection
// is in):
//   - The native FLUSH (between goverbs peers whose devices have it, with
//     extensions where the transport negotiates them): the target
//     executes the flush after placing everything written before on the
//     connection. FlushVisibility completes when the data is in the
//     target's memory, visible to its CPU; FlushPersistent completes only
//     after the target has also written the range back to the file that
//     backs the region (msync, MS_SYNC, on the target host), so it survives
//     the target process and, as far as the file system and disk keep their
//     word, the host.
//   - Otherwise (a librpma peer, extensions off, or a device without
//     native FLUSH such as provider rdmacore's), as librpma does without
//     native flush: an 8-byte RDMA Read from dst at dstOff after the writes.
//     Its response is sent after the earlier writes were placed, so both
//     types guarantee visibility at the target; persistence holds only if
//     the target's memory is persistent once placed (real persistent memory
//     with direct write, which is what the target declares with
//     PeerCfg.SetDirectWriteToPmem): no msync happens.
//
// FlushPersistent needs the remote peer configuration (ApplyRemotePeerCfg)
// to declare direct write to persistent memory, and dst's usage must
// include the flush type; otherwise Flush returns ErrNoSupp. It returns
// ErrInval for bad arguments.
func (c *Conn) Flush(dst *RemoteMR, dstOff, n int, typ FlushType, flags CompletionFlags, opCtx uint64) error {
	if c == nil || dst == nil {
		return wrap(ErrInval, "nil connection or region")
	}
	sf, err := flags.send()
	if err != nil {
		return err
	}
	var need Usage
	var vt verbs.FlushType
	switch typ {
	case FlushPersistent:
		need, vt = UsageFlushTypePersistent, verbs.FlushPersistent
		if !c.remote.Load().DirectWriteToPmem() {
			if !c.remoteSet.Load() {
				return wrap(ErrNoSupp, "a persistent flush needs the remote peer's configuration to declare direct write "+
					"to persistent memory, as librpma requires, and none was applied: the target sets "+
					"PeerCfg.SetDirectWriteToPmem(true) (rpma_peer_cfg_set_direct_write_to_pmem) and sends "+
					"its descriptor, which this side applies with Conn.ApplyRemotePeerCfg")
			}
			return wrap(ErrNoSupp, "a persistent flush needs the remote peer's configuration to declare direct write "+
				"to persistent memory, as librpma requires, and the one applied (ApplyRemotePeerCfg) does not: the "+
				"target must set PeerCfg.SetDirectWriteToPmem(true) (rpma_peer_cfg_set_direct_write_to_pmem)")
		}
	case FlushVisibility:
		need, vt = UsageFlushTypeVisibility, verbs.FlushGlobal
	default:
		return wrap(ErrInval, "flush type %d", typ)
	}
	if dst.usage&need == 0 {
		return wrap(ErrNoSupp, "a %v flush needs the remote region registered with usage %v, and its usage is %v: "+
			"the target must register it with that usage (Peer.RegMR, rpma_mr_reg)", typ, need, dst.usage)
	}
	if err := checkRange("flush", dstOff, n, dst.size); err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: opCtx, Opcode: verbs.WRFlush, Flags: sf, RemoteAddr: dst.addr + uint64(dstOff), RKey: dst.rkey,
		FlushLen: uint32(min(n, 1<<31)), FlushType: vt}
	if done, err := c.postNative(&c.flushNative, &wr, "no native flush: using a read after the writes"); done {
		return err
	}
	rn := min(8, int(dst.size)-dstOff)
	off := dstOff
	if rn < 8 && dst.size >= 8 {
		off, rn = int(dst.size)-8, 8
	}
	return c.post(&verbs.SendWR{WRID: opCtx, Opcode: verbs.WRRDMARead, Flags: sf,
		SGList: []verbs.SGE{c.raw.SGE(0, rn)}, RemoteAddr: dst.addr + uint64(off), RKey: dst.rkey}, true, true)
}

// postNative posts wr, a FLUSH or an ATOMIC_WRITE, unless native says
// that the device or the peer lacks it. done false means the caller must
// use its fallback: native remembers, and fallback is logged once.
func (c *Conn) postNative(native *atomic.Int32, wr *verbs.SendWR, fallback string) (done bool, err error) {
	if native.Load() < 0 {
		return false, nil
	}
	err = c.post(wr, false, false)
	if !errors.Is(err, ErrNoSupp) {
		if err == nil {
			native.CompareAndSwap(0, 1)
		}
		return true, err
	}
	native.Store(-1)
	logAt(LogInfo, fallback)
	return false, nil
}

// NativeFlush reports whether the connection's flushes are the native
// FLUSH: true once one was posted natively, false once one fell back to
// librpma's read after the writes (and before the first, and always on a
// peer without native FLUSH, Peer.NativeFlush).
func (c *Conn) NativeFlush() bool { return c.flushNative.Load() == 1 }

// NativeAtomicWrite is NativeFlush for atomic writes: true once one was
// the native ATOMIC_WRITE.
func (c *Conn) NativeAtomicWrite() bool { return c.awNative.Load() == 1 }

// Send sends n bytes of src at off as a message (rpma_send); n may be 0.
// It returns ErrInval for bad arguments and ErrProvider when posting fails.
func (c *Conn) Send(src *MR, off, n int, flags CompletionFlags, opCtx uint64) error {
	return c.send(src, off, n, flags, opCtx, verbs.WRSend, 0)
}

// SendWithImm is Send with the immediate value imm, delivered in the
// receive's completion (rpma_send_with_imm). Towards a peer without
// immediate data it returns ErrNoSupp.
func (c *Conn) SendWithImm(src *MR, off, n int, imm uint32, flags CompletionFlags, opCtx uint64) error {
	return c.send(src, off, n, flags, opCtx, verbs.WRSendWithImm, imm)
}

func (c *Conn) send(src *MR, off, n int, flags CompletionFlags, opCtx uint64, op verbs.WROpcode, imm uint32) error {
	if c == nil || (src == nil && n > 0) {
		return wrap(ErrInval, "nil connection or region")
	}
	sf, err := flags.send()
	if err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: opCtx, Opcode: op, Flags: sf, ImmData: imm}
	if src != nil {
		if err := checkRange("send source", off, n, uint64(src.Size())); err != nil {
			return err
		}
		wr.SGList = []verbs.SGE{src.mr.SGE(off, n)}
	}
	return c.post(&wr, false, false)
}

// Recv posts a receive of up to n bytes into dst at off, completed with
// opCtx (rpma_recv). It returns ErrInval for bad arguments or when the
// connection uses an SRQ, and ErrProvider when posting fails.
func (c *Conn) Recv(dst *MR, off, n int, opCtx uint64) error {
	if c == nil || dst == nil {
		return wrap(ErrInval, "nil connection or region")
	}
	if c.srq != nil {
		return wrap(ErrInval, "the connection uses an SRQ: post receives with SRQ.Recv")
	}
	return postRecv(c.qp, dst, off, n, opCtx)
}
