// Package shm is goverbs' same-host provider: RC queue pairs of processes on
// one machine, connected through shared memory, with one-sided operations
// that the initiator carries out alone. Importing it registers the device
// "shm0" and the connection scheme "unix" of package rdmacm:
//
//	ln, err := rdmacm.Listen("unix:@my-service") // an abstract socket name
//	...
//	id, err := rdmacm.Dial(ctx, "unix:/run/my.sock", nil, nil) // or a path
//
// (Example_addresses holds these lines, and Example a whole server and
// client.)
//
// # Connections
//
// A connection is a Unix SOCK_SEQPACKET socket plus two shared segments
// (memfds passed with SCM_RIGHTS), one created by each side. The socket
// carries the setup (private data, IRD/ORD, accept or reject), the
// occasional wake-up, and the mapping of regions; its end-of-file is how a
// peer that exits or is killed is noticed. A segment holds the rings its
// owner consumes: requests (SEND, RDMA WRITE to memory the peer cannot map,
// READ and atomic requests) and responses (READ data, atomic results), kept
// apart so that a side answering reads never waits for a side that is
// itself answering reads.
//
// # Data paths
//
// Memory registered over a verbs.AllocBuffer (a memfd) is mapped by the peer
// the first time one of its rkeys is used: the initiator asks, the target
// checks the key and PD and sends the memfd; from then on RDMA WRITE, READ
// and atomics to it are a memcpy or an atomic instruction by the initiator,
// with no action of the target's CPU. The initiator checks bounds, the
// region's access flags and the target QP's access flags and IRD on its
// view; every such access holds a use count in a slot of the target's
// segment, which deregistration (or a Send with Invalidate) clears and
// waits out, so no direct access starts after ibv_dereg_mr returned. The
// WRITEs and READs that PostSend carries out itself count once per
// PostSend instead, in a window the initiator opens in its own segment
// and the deregistration waits for (a Dekker handshake with the slot: one
// atomic instruction per PostSend, none on the target's side), and keep
// the region's mapping held between PostSends. Their checks of what the
// target can change (its QP's state and access flags, the slot) stand
// until a version word in the target's segment moves: the target bumps
// it after each such change, a deregistration between clearing the slot
// and reading the initiator's window.
// An access that fails those checks is not made: it goes the other way,
// below, so that the target reports it as it would any remote error. Until
// the mapping arrives, requests of up to 64 KiB go that way too (larger
// ones wait for it), and so do those posted while earlier requests of the
// QP are still in the target's ring (RC order: larger ones wait for the
// target to consume them, then copy once); a target that busy-polls
// notices the request for a mapping without waiting for the runtime's
// network poller (a count of socket messages in its segment).
//
// Memory that is not a memfd (Go heap, mmap of a file) cannot be mapped by
// another process: WRITEs to it travel through the request ring and are
// placed by the target, READs and atomics are answered by the target
// through the response ring. The target's progress runs when its
// application polls a CQ of the QP, and otherwise on the connection's
// goroutine, woken through the socket. (process_vm_readv/writev are not
// used: they need ptrace rights that hardened hosts withhold.)
//
// FLUSH always goes through the target, which orders it after the data it
// placed and, for IBV_FLUSH_PERSISTENT, writes the range back to the file
// behind the region (msync) before it completes. ATOMIC_WRITE is an atomic
// store by the initiator in a mapped region, or by the target otherwise.
//
// A SEND of up to 2 KiB is copied into the request ring by the sender and
// out of it into the receive buffer by the receiver; a larger one from a
// region in an AllocBuffer is copied once, by the receiver, straight from
// the sender's region (which the sender offers the first time); a larger one
// from other memory goes through the ring in pieces of up to 64 KiB.
//
// A SEND that finds no receive posted waits in the ring (everything behind
// it waits too, as on an RC connection) and the receiver shows it to the
// sender: with rnr_retry 7 (the default of a nil rdmacm.ConnParam) the
// sender waits for ever, otherwise it gives up after rnr_retry times the
// receiver's min_rnr_timer with RNR_RETRY_EXC_ERR; its QP then fails, and
// the receiver, seeing that, drops what it had not executed.
//
// # Trust
//
// What a peer process can and cannot do, and who enforces it:
//
//   - Who connects. A listener accepts only processes of its own user id
//     by default (the kernel's SO_PEERCRED; Config.AllowPeer widens or
//     narrows it, Request.PeerCred tells who asked). An abstract name
//     (unix:@name) can be reached by every local user, so this check is
//     what keeps them out; a path socket is created 0600 (Config.SocketMode)
//     and its permissions keep others out before that.
//   - What a peer maps. Only a region registered over a verbs.AllocBuffer
//     and granting both remote read and remote write is ever mapped by the
//     peer; every other region (local only, read only, write or atomic
//     only, Go memory, a mapped file) stays in this process, and each
//     access the peer asks for is checked here against the registration:
//     the OS enforces that the peer cannot touch it. A mapped region is
//     handed over as the memfd of its whole AllocBuffer (the kernel cannot
//     hand out part of a file): a hostile process could map the rest of
//     that buffer and keep its mapping after deregistration, which revokes
//     the region in goverbs' protocol (the peer's slot; Dereg waits at most
//     a second in all for accesses in progress, and a peer that does not
//     release them is disconnected) but not in the kernel. Keep memory a
//     peer must never see in AllocBuffers of its own, or set
//     Config.NoDirectAccess: every RDMA operation then goes through this
//     process.
//   - Keys. Keys are scrambled per device, so one key says nothing of the
//     others; a peer that asks for keys that do not exist is disconnected
//     after a few.
//   - What a peer writes. Every ring record, position, status word,
//     mapping offer and socket message from the peer is checked; one that
//     no correct peer sends (a corrupt record, a reference to a region it
//     never offered, a status verbs does not have, offers beyond the bounds
//     of a connection's mappings) ends that connection with an error and
//     flushes its work requests; no other connection is touched, and the
//     process neither panics nor maps without bound.
//
// # Completions and errors
//
// Work requests complete as on InfiniBand RC: a SEND, a WRITE through the
// ring and a WRITE WITH IMM complete when the target has consumed them, a
// READ or an atomic when its data is in the sink, a direct WRITE when its
// copy is done. An error the target detects (access, length, a missing
// key) is reported back on the request that caused it (REM_ACCESS_ERR,
// REM_INV_REQ_ERR, REM_OP_ERR), the target QP moves to ERR with the
// asynchronous event IB would raise, and the requests behind it flush. A
// QP that enters ERR on its own stops consuming; its peer's outstanding
// requests then complete with RETRY_EXC_ERR at once (hardware would wait
// for its transport timeout first). A peer that disconnects, exits or dies
// flushes every outstanding request with WR_FLUSH_ERR.
//
// # Polling and waking
//
// A CQ that the application polls drives the connection in its goroutine
// (busy polling, no system call per message); when it blocks (CQ.Wait,
// ReqNotify, a completion channel) or stops polling for two milliseconds,
// each side asks the other, through a flag in shared memory, to poke it
// over the socket, and an idle connection costs no CPU. A blocked waiter
// reads the pokes itself, parked in Go's netpoller on that socket. And, as
// with a kernel socket, whose reader wakes the writer's netpoller when it
// reads, the peer's read of each poke wakes this process's netpoller:
// the wake has nothing to do, but it comes while the peer works on the
// message, so the CPU a waiter sleeps on is awake when the reply comes
// (on CPUs slow to leave their idle state, a sleeping round trip between
// two CPUs takes half the time). Not when both processes are confined to
// one and the same CPU, where it would only cost a context switch.
//
// While the application polls, a receiver acknowledges (publishes how far
// it consumed) at its next poll rather than in the one that hands over the
// completion, which would otherwise wait for that store to reach the
// sender's core; requests the sender waits for (signaled ones, or any once
// half its send queue is unacknowledged) are acknowledged at once, and an
// application that stops polling has its acknowledgements published within
// a few milliseconds. Small messages stay in the first 8 KiB of the ring
// while the receiver keeps up (walking the whole ring stalls on page
// crossings on virtual machines).
//
// A busy-polling goroutine holds a CPU. When every CPU of the host is held
// so (two polling processes on two CPUs), the Go runtime's own threads of
// each process (the idle Ps' threads that a yield or a timer wakes, the
// runtime's monitor) can only run by preempting a poller, and the latency
// distribution grows a tail of a few microseconds per preemption; setting
// GOMAXPROCS to the number of polling goroutines leaves the runtime no idle
// P to wake (on a 2-vCPU VM, two processes with GOMAXPROCS=1 each: the
// 99.9th percentile of an 8-byte ping-pong fell from 10-20 to 2-8 µs).
package shm

import (
	"encoding/binary"
	"errors"
	"os"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Config configures a listener (Listen) or a connection (Dial); package
// rdmacm passes one through. A nil *Config, or a zero field, means the
// default.
type Config struct {
	// NoDirectAccess keeps peers from mapping our regions, even those in
	// AllocBuffers: every RDMA operation of the peer then goes through us
	// and is checked against our registrations (see Trust).
	NoDirectAccess bool
	// AcceptTimeout bounds the wait for a connection request after a socket
	// connection is accepted (default 5 s).
	AcceptTimeout time.Duration
	// DialTimeout bounds the wait for the answer when the Dial context has
	// no deadline (default 10 s).
	DialTimeout time.Duration
	// AllowPeer decides, from its credentials (SO_PEERCRED), whether a
	// process may connect to a listener; the others are rejected before
	// Accept sees them. Nil allows only processes of this process's user
	// (uid): an abstract name (unix:@name) can be reached by every local
	// user, a path by whoever its permissions allow.
	AllowPeer func(PeerCred) bool
	// SocketMode is the permission of a listener's socket file (a path
	// address; default 0600: only this user may connect).
	SocketMode os.FileMode
}

// Defaults of Config's fields.
const (
	DefaultAcceptTimeout = 5 * time.Second
	DefaultDialTimeout   = 10 * time.Second
	DefaultSocketMode    = os.FileMode(0o600)
)

// resolve returns the configuration c stands for, defaults filled in.
func (c *Config) resolve() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.AcceptTimeout <= 0 {
		r.AcceptTimeout = DefaultAcceptTimeout
	}
	if r.DialTimeout <= 0 {
		r.DialTimeout = DefaultDialTimeout
	}
	if r.SocketMode == 0 {
		r.SocketMode = DefaultSocketMode
	}
	if r.AllowPeer == nil {
		uid := uint32(os.Getuid())
		r.AllowPeer = func(p PeerCred) bool { return p.UID == uid }
	}
	return r
}

// PeerCred are the credentials of the process at the other end of a
// connection, as the kernel recorded them when it connected (SO_PEERCRED).
type PeerCred struct {
	PID      int32
	UID, GID uint32
}

// Params are a connection's parameters (rdma_conn_param's, as shm carries
// them).
type Params struct {
	// PrivateData goes with the request (Dial), the accept or the reject,
	// at most MaxPrivateData bytes.
	PrivateData []byte
	// IRD (responder_resources): RDMA reads/atomics this side accepts
	// outstanding; ORD (initiator_depth): those it issues. At most 128;
	// 0 means 128, a negative value none.
	IRD, ORD int
	// RNRRetry is the QP's rnr_retry: how often a SEND that finds no
	// receive is retried before it fails; 7 (or more) retries for ever.
	// 0 means 7, a negative value none.
	RNRRetry int
}

// DeviceName is the name of the shared-memory device.
const DeviceName = "shm0"

// MaxPrivateData is the private data a connect, accept or reject carries.
const MaxPrivateData = 196

// maxIRDORD bounds IRD and ORD.
const maxIRDORD = 128

var errCMOnly = errors.New("shm: RC QPs of shm0 are connected by rdmacm (unix: addresses), not by Modify")

var dev = engine.NewDevice(engine.Config{
	Name:      DeviceName,
	GUID:      0x0200_5eff_fe5a_0001,
	NodeType:  verbs.NodeUnspecified,
	Transport: verbs.TransportUnspecified,
	GID:       gidOf(0x0200_5eff_fe5a_0001),
	Attr: verbs.DeviceAttr{
		FWVer:           "goverbs-shm 1",
		MaxMRSize:       1 << 40,
		PageSizeCap:     4096,
		MaxQP:           1 << 14,
		MaxQPWR:         1 << 14,
		MaxSGE:          16,
		MaxSGERd:        16,
		MaxCQ:           1 << 14,
		MaxCQE:          1 << 20,
		MaxMR:           1 << 20,
		MaxPD:           1 << 14,
		MaxQPRdAtom:     maxIRDORD,
		MaxQPInitRdAtom: maxIRDORD,
		MaxResRdAtom:    maxIRDORD << 14,
		AtomicCap:       verbs.AtomicGlob, // atomic with respect to the CPUs of every process
		MaxSRQ:          1 << 14,
		MaxSRQWR:        1 << 14,
		MaxSRQSGE:       16,
		MaxInlineData:   4096,
		MaxPKeys:        1,

		// FLUSH and ATOMIC_WRITE between goverbs peers, which shm always is.
		DeviceCapFlagsEx: verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite,
	},
	Port: verbs.PortAttr{
		State:      verbs.PortActive,
		MaxMTU:     verbs.MTU4096,
		ActiveMTU:  verbs.MTU4096,
		GIDTblLen:  1,
		MaxMsgSz:   1 << 31,
		PKeyTblLen: 1,
		LinkLayer:  verbs.LinkLayerUnspecified,
		PhysState:  5,
	},
	CMOnly: errCMOnly,
})

func gidOf(guid uint64) verbs.GID {
	var g verbs.GID
	g[0], g[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

type provider struct{}

func (provider) Devices() []driver.Device { return []driver.Device{dev} }

func init() {
	driver.Register("shm", provider{})
	cm.Register(transport{})
}
