// Package iwarp is goverbs' RDMA provider over TCP, speaking the iWARP wire
// protocol: MPA (RFC 5044) with the enhanced connection setup of RFC 6581,
// DDP (RFC 5041) and RDMAP (RFC 5040), as the Linux SoftiWARP driver (siw)
// speaks them, so a goverbs program interoperates with siw peers and the
// rdma-core tools that run on them. Between goverbs peers it also carries the
// RFC 7306 extensions (immediate data and atomics).
//
// Each RC QP has its own TCP connection. Connections are made by Dial and
// Listen (package rdmacm wraps them as rdma_connect / rdma_listen /
// rdma_accept / rdma_reject); a QP on the "iwarp0" device is in RESET or INIT
// until a connection establishes it, then in RTS.
//
// # Data path
//
// Send and RDMA Write messages are cut into FPDUs no larger than the TCP
// MSS (as siw does, so hardware RNICs accept them too) and written with one
// gathered write (writev) straight from the registered memory, by the
// goroutine that posted them. They complete when TCP has taken the bytes
// (siw's semantics: a completion does not mean the peer has them). RDMA
// Reads and atomics complete when their response has been placed. Small
// requests queued one behind another (a list posted at once, or requests
// that waited for a busy stream) share one writev: up to 16 messages of at
// most 16 KiB each, 64 KiB in all (the engine's Batcher contract); the
// bytes on the wire are the same.
//
// A goroutine per connection reads FPDUs and places their payload straight
// from the socket into the target memory region: the bytes of a payload
// that arrived together with its header in one read (at most 4 KiB) are
// copied from that small staging buffer, the rest is read directly into the
// region. Read responses, atomic responses and Terminates are sent by a
// second goroutine per connection, the transmit goroutine (a small response
// goes out from the reading goroutine when the socket takes it at once), so
// the reading goroutine never blocks on the socket's send side (which could
// deadlock two peers).
//
// Posting never waits for the peer, as ibv_post_send does not: the write
// is non-blocking, and a message the socket takes only in part (the peer
// reads slowly, or not at all: a zero window, a stopped process) stays
// outstanding while the transmit goroutine writes the rest as room appears
// (or, while the application polls, its polls do). Nothing else goes on the
// stream meanwhile; requests posted behind it wait in the send queue, and
// once max_send_wr are outstanding PostSend fails with verbs.ErrQueueFull
// (ENOMEM in C). A peer that never reads again is detected by the dead-peer
// timeout (Config.DeadPeerTimeout), and everything outstanding, the partly
// written message included, is flushed.
//
// # Progress: automatic and polled
//
// Without help, the receiving goroutine of each connection is woken by the
// netpoller when bytes arrive (automatic progress: no CPU spent while idle,
// but a wake-up costs tens of microseconds on small VMs). When the
// application busy-polls a CQ of the connection, CQ.Poll itself reads the
// socket without blocking whenever the CQ is empty (polled mode, as in
// libfabric's manual progress): a message then costs one read(2) on the
// polling goroutine and no context switch, and the receiving goroutine steps
// aside until the application blocks (CQ.Wait, ReqNotify) or stops polling
// (the engine decides when: engine.PollIdle). Both share one resumable
// receive state machine, under a lock.
// Meanwhile the socket's receive low-water mark is raised (Linux), so that
// arrivals do not wake an idle runtime thread from epoll_wait for nothing.
// Writes are raw non-blocking writev calls; only the transmit goroutine
// ever waits in the netpoller for room on a full socket.
//
// # Start-up
//
// MPA lets the responder transmit only after the initiator's first FPDU
// (siw as initiator fails a connection whose MPA Reply is followed by FPDUs
// in the same read). A goverbs responder holds its send queue until that
// FPDU, or for 200 ms when the initiator stays silent: some applications
// have the responder speak first (perftest's write_lat server writes
// first), and siw's responder does not wait at all. Conversely, siw has a
// start-up race as responder (an FPDU that arrives before its receive
// upcall is installed waits for the next TCP event), so a goverbs initiator
// that has sent but received nothing for 200 ms from a non-goverbs peer
// sends one zero-length RDMA Write to wake it.
//
// # Errors
//
// A protocol or access error sends a Terminate with the layer, error type
// and code of RFC 5040 (and of siw's table), closes the connection, moves
// the QP to ERR and flushes every outstanding work request with
// WR_FLUSH_ERR, the failing one with its specific status. A peer that
// disappears (FIN, RST, a received Terminate) gives the same flush. As on
// siw, a Send that finds no posted receive is fatal (iWARP has no RNR), and
// errors detected by the remote side for a Send or an RDMA Write cannot be
// reported in that request's completion (it completed at hand-off): they
// flush what is outstanding. An RDMA Read that the peer refuses completes
// with REM_ACCESS_ERR when the peer's Terminate names it.
//
// A frame that a peer begins and never finishes would hold the connection
// for ever (siw waits so): once a frame has gone Config.FrameTimeout
// (default 15 s) without a byte more, the connection ends with a Terminate
// (LLP, MPA, "TCP connection lost", which RFC 5044 gives for a stream lost
// by timeout), the QP goes to ERR with a QP_FATAL event and everything
// outstanding is flushed. Progress resets the bound, so a slow peer that
// keeps sending is never cut off; bytes that wait in the socket for an
// application that has stopped polling are not the peer's stall either.
// The check costs the receive path a counter: a connection's timer runs
// only while a frame is incomplete, ticking at a quarter of the bound, so
// a stalled peer is cut between FrameTimeout and 1.5 FrameTimeout after
// its last byte, in automatic and polled progress alike. (The MPA
// exchange before it has its own bound, Config.AcceptTimeout.)
//
// # Extensions between goverbs peers
//
// The extensions are offered only when the application asks
// (Params.Extensions, rdmacm.ConnParam.Extensions or
// Config.Extensions): the initiator marks its MPA Request with both RTR
// offers of the RFC 6581 block (bits C and D) while leaving the P2P bit (A)
// clear, and a goverbs responder answers a marked Request with a marked
// Reply. No mark is inert towards siw: it echoes the MPA flags' reserved bits
// (and some versions give them meanings), an IRD above 128 changes its
// negotiated ORD, and siw 6.1 reads the RTR bits even without A, waits for
// an RTR and then intermittently stalls its first RDMA Read (seen in the
// vmlab, 2 failures in 8 connections, none in 12 without the mark). So a
// goverbs initiator never marks unless told to, and a siw initiator never
// sends a marked Request. Only when both frames carry the mark
// are RFC 7306 messages used: Atomic Request/Response for compare-and-swap and
// fetch-and-add, Immediate Data for RDMA_WRITE_WITH_IMM (a Write followed by
// Immediate Data) and SEND_WITH_IMM (Immediate Data, followed by the Send
// when the send has a payload), and goverbs' own FLUSH and ATOMIC_WRITE
// (IBTA 1.5 operations that RFC 7306 lacks) as Atomic Requests with atomic
// codes the RFC leaves reserved (wire.FlushGoverbs, wire.AtomicWriteGoverbs),
// answered by an Atomic Response once the target has executed them. The
// 8-byte immediate carries the 32-bit
// verbs value in its first word and goverbs flags in the second: 1 = a Send
// follows that carries it, 2 = it follows a Write. Against any other peer
// PostSend refuses these opcodes with ErrNotSupported.
package iwarp

import (
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// DeviceName is the name of the iWARP device.
const DeviceName = "iwarp0"

// Config holds the provider's tunables for a listener (Listen) or a
// connection (Dial); package rdmacm passes one through. A nil *Config, or
// a zero field, means the default.
type Config struct {
	// CRC asks for MPA CRC32C on new connections (it is on when either side asks).
	CRC bool
	// MaxFPDU caps the size of transmitted FPDUs in bytes; 0 means the TCP MSS
	// of the connection (siw's choice).
	MaxFPDU int
	// ConnectTimeout bounds a Dial whose context has no deadline (a
	// deadline, shorter or longer, replaces it), and a responder's sending
	// of its Reply (default 10 s, as siw).
	ConnectTimeout time.Duration
	// AcceptTimeout bounds the wait for an MPA Request after TCP accept
	// (default 5 s, as siw).
	AcceptTimeout time.Duration
	// Extensions makes Dial offer the RFC 7306 extensions whatever
	// Params.Extensions says. Off by default: the offer is a mark in the
	// MPA Request that siw does not ignore.
	Extensions bool
	// DeadPeerTimeout bounds how long a peer may stay silent while we have
	// unacknowledged data or keepalive probes outstanding (TCP_USER_TIMEOUT
	// and TCP keepalive): a peer that vanished without FIN or RST is
	// detected within about this time, and the QP is flushed (default 10
	// s; negative: TCP's own timeouts only, which take many minutes).
	DeadPeerTimeout time.Duration
	// FrameTimeout bounds how long a frame (an FPDU) that has begun may go
	// without a byte more: a peer that stops in the middle of one is cut
	// off with a Terminate (LLP, MPA, "TCP connection lost") between this
	// time and half as much again after its last byte, and the QP is
	// flushed with a QP_FATAL event; a peer that keeps sending, however
	// slowly, is never cut (default 15 s; negative: no bound, as siw).
	FrameTimeout time.Duration
}

// Defaults of Config's fields.
const (
	DefaultConnectTimeout  = 10 * time.Second
	DefaultAcceptTimeout   = 5 * time.Second
	DefaultDeadPeerTimeout = 10 * time.Second
	// DefaultFrameTimeout is longer than the 12.6 s a TCP stream that
	// still makes progress can stall for: six retransmissions in a row,
	// their timeout doubling from 200 ms.
	DefaultFrameTimeout = 15 * time.Second
)

// resolve returns the configuration c stands for, defaults filled in.
func (c *Config) resolve() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.ConnectTimeout <= 0 {
		r.ConnectTimeout = DefaultConnectTimeout
	}
	if r.AcceptTimeout <= 0 {
		r.AcceptTimeout = DefaultAcceptTimeout
	}
	if r.DeadPeerTimeout == 0 {
		r.DeadPeerTimeout = DefaultDeadPeerTimeout
	}
	if r.FrameTimeout == 0 {
		r.FrameTimeout = DefaultFrameTimeout
	}
	return r
}

// Params are a connection's parameters (rdma_conn_param's, as iWARP
// carries them).
type Params struct {
	// PrivateData goes in the MPA Request (Dial) or Reply (Accept).
	PrivateData []byte
	// IRD (responder_resources): RDMA reads/atomics this side accepts
	// outstanding; ORD (initiator_depth): those it issues. Both at most
	// 128; 0 means 128, a negative value none.
	IRD, ORD int
	// Extensions (Dial) offers the RFC 7306 extensions, which only goverbs
	// peers speak; a goverbs responder answers an offer by itself.
	Extensions bool
	// Source (Dial) is the local address the TCP connection leaves from,
	// an IP address with a port (0: any); "" lets the kernel choose.
	Source string
}

// maxIRDORD is siw's SIW_MAX_IRD_QP / SIW_MAX_ORD_QP.
const maxIRDORD = 128

var dev = engine.NewDevice(engine.Config{
	OwnCapture: true, // package capture records the TCP stream (hook.IWARPCapture)
	Name:       DeviceName,
	GUID:       0x0200_5eff_fe77_0001,
	NodeType:   verbs.NodeRNIC,
	Transport:  verbs.TransportIWARP,
	// A link-local GID from the GUID, as an RNIC derives one from its MAC.
	GID: verbs.GID{0xfe, 0x80, 6: 0, 8: 0x02, 9: 0x00, 10: 0x5e, 11: 0xff, 12: 0xfe, 13: 0x77, 14: 0x00, 15: 0x01},
	Attr: verbs.DeviceAttr{
		FWVer:       "goverbs-iwarp 1",
		MaxMRSize:   1 << 40,
		PageSizeCap: 4096,
		VendorID:    0x626d74, // siw's vendor id ("bmt")
		// A QP is a TCP connection and two CQs, and the process's
		// descriptors are the real limit (one per QP): these allow
		// 65,536 connections.
		MaxQP:           1 << 16,
		MaxQPWR:         1 << 14,
		MaxSGE:          6,
		MaxSGERd:        6,
		MaxCQ:           1 << 17,
		MaxCQE:          1 << 20,
		MaxMR:           1 << 20,
		MaxPD:           1 << 14,
		MaxQPRdAtom:     maxIRDORD,
		MaxQPInitRdAtom: maxIRDORD,
		MaxResRdAtom:    maxIRDORD << 16,
		AtomicCap:       verbs.AtomicHCA, // only towards goverbs peers (RFC 7306)
		MaxSRQ:          1 << 14,
		MaxSRQWR:        1 << 14,
		MaxSRQSGE:       6,
		MaxInlineData:   1024,
		MaxPKeys:        1,

		// FLUSH and ATOMIC_WRITE towards goverbs peers that negotiated them (the extensions), as the atomics.
		DeviceCapFlagsEx: verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite,
	},
	Port: verbs.PortAttr{
		State:      verbs.PortActive,
		MaxMTU:     verbs.MTU4096,
		ActiveMTU:  verbs.MTU1024,
		GIDTblLen:  1,
		MaxMsgSz:   1 << 31,
		PKeyTblLen: 1,
		LinkLayer:  verbs.LinkLayerEthernet,
		PhysState:  5,
	},
	CMOnly: errCMOnly,
})

type provider struct{}

func (provider) Devices() []driver.Device { return []driver.Device{dev} }

func init() {
	driver.Register("iwarp", provider{})
	cm.Register(transport{})
}
