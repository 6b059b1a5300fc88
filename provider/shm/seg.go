package shm

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"

	"github.com/goverbs/goverbs/provider/shm/internal/ring"
)

// A segment is the shared memory one side of a connection creates and
// passes to the other (memfd + SCM_RIGHTS). Its owner consumes it: it holds
// the owner's two inbound rings (requests, and responses to the owner's
// reads and atomics), the owner's state words that the peer reads, and the
// slots through which the owner lets the peer access its regions directly.
//
//	0     request ring control  (tail, head, sleep, wait: one cache line each)
//	256   response ring control
//	512   nak position, nak status, RNR position   (owner writes, peer reads)
//	576   QP state, IRD, access flags, min_rnr_timer (owner writes, peer reads)
//	592   the stamp keys of the request and response rings (owner writes at creation)
//	608   the owner's version: moves on after any change of the words the peer's direct window checks (owner adds, peer reads)
//	640   socket messages the peer sent that want handling (peer adds, owner reads)
//	704   the owner's direct window: odd while its PostSend may copy in the peer's regions (owner writes, peer reads)
//	4096  export slots, 8 bytes each
//	...   request ring data, then response ring data
const (
	ctlReq    = 0
	ctlResp   = 256
	offNakPos = 512
	offNakSt  = 520
	offRNRPos = 528 // position+1 of a SEND that waits for a receive (0: none)
	offState  = 576
	offIRD    = 580
	offAccess = 584
	offMinRNR = 588 // min_rnr_timer
	offKeys   = 592 // the stamp keys of the request and response rings (owner writes at creation)
	// offVer is the owner's version of what the peer's direct window
	// checks (its state, NAK position, access flags and IRD, and its
	// export slots): the owner adds one after each change of them, so a
	// peer that finds it where it was when those checks last passed need
	// not make them again (sender.live). Never zero while the segment
	// lives (a retired segment reads zero: it has moved).
	offVer = 608
	// offSockMsgs counts the socket messages the peer sent that ask for
	// handling (mapping requests, answers and offers), so that an owner
	// that busy-polls notices them without reading the socket (kickRx).
	offSockMsgs = 640
	// offDirect is the owner's direct window (sender.openWindow): a
	// count, odd while a PostSend of the owner's may copy in the peer's
	// mapped regions; a revocation waits for it to move on.
	offDirect = 704
	offSlots  = 4096

	stateOK  = 0
	stateErr = 1 // the owner's QP is in ERR: it consumes nothing more
)

// layout is the geometry of a segment; both sides use the same one.
type layout struct {
	reqSize, respSize, slots int
}

var defaultLayout = layout{reqSize: 256 << 10, respSize: 64 << 10, slots: 1024}

func (l layout) reqOff() int  { return offSlots + (l.slots*8+4095)&^4095 }
func (l layout) respOff() int { return l.reqOff() + l.reqSize }
func (l layout) size() int    { return l.respOff() + l.respSize }

func (l layout) valid() bool {
	pow2 := func(n int) bool { return n >= 4096 && n <= 64<<20 && n&(n-1) == 0 }
	return pow2(l.reqSize) && pow2(l.respSize) && l.slots > 0 && l.slots <= 1<<16
}

// segment is a mapped segment.
type segment struct {
	ring.Segment
	l layout
}

// newSegment creates a segment in a fresh memfd; the caller closes the fd
// once it has been passed to the peer.
func newSegment(l layout) (*segment, int, error) {
	rs, fd, err := ring.Create(l.size())
	if err != nil {
		return nil, -1, err
	}
	s := &segment{Segment: *rs, l: l}
	// Each ring's stamps are keyed (see package ring): a fresh segment's
	// zeros are no record.
	for i := range 2 {
		*s.U64(offKeys + 8*i) = rand.Uint64() | 1
	}
	*s.U64(offVer) = 1
	// Until the application polls, the owner asks to be poked: from the
	// start, since the peer may publish as soon as it has mapped the
	// segment, before the owner's newConn. (Set there only, a listener's
	// first request went unseen when the client published it between the
	// accept and newConn: its poke was never sent, and nothing looked.)
	for _, ctl := range []int{ctlReq, ctlResp} {
		atomic.StoreUint32(s.Ctl(ctl).Sleep, 1)
	}
	return s, fd, nil
}

// mapSegment maps a segment the peer sent, after checking its size.
func mapSegment(fd int, l layout) (*segment, error) {
	if !l.valid() {
		return nil, errors.New("shm: invalid segment layout")
	}
	rs, err := ring.Map(fd, l.size())
	if err != nil {
		return nil, err
	}
	return &segment{Segment: *rs, l: l}, nil
}

// key returns the stamp key of the ring whose control block is at ctl.
func (s *segment) key(ctl int) uint64 { return atomic.LoadUint64(s.U64(offKeys + 8*(ctl/ctlResp))) }

func (s *segment) slot(i int) *uint64 { return s.U64(offSlots + 8*i) }

// moved bumps the owner's version (offVer), after a change of a word the
// peer's direct window checks: an atomic add, ordered after the change
// (and, for a revocation, before its read of the peer's window).
func (s *segment) moved() { atomic.AddUint64(s.U64(offVer), 1) }

// Record kinds and flags (ring.Rec's Kind and Flags).
const (
	recSend       = 2  // a piece of a SEND message
	recWrite      = 3  // a piece of an RDMA WRITE the target places
	recImm        = 4  // the immediate data of a WRITE WITH IMM placed directly
	recReadReq    = 5  // an RDMA READ request the target answers
	recReadResp   = 6  // a piece of a READ response
	recAtomicReq  = 7  // an atomic the target executes (payload: compare/add, swap)
	recAtomicResp = 8  // an atomic's result (payload: the old value)
	recSendRef    = 9  // a SEND whose data the receiver copies from the sender's region (rkey: its key, addr: where)
	recFlush      = 10 // a FLUSH the target carries out (imm: its type, total: its length)
	recAtomicWr   = 11 // an ATOMIC_WRITE the target carries out (payload: the 8 bytes)

	fFirst     = 1 << 0
	fLast      = 1 << 1
	fImm       = 1 << 2 // imm carries immediate data
	fInv       = 1 << 3 // imm carries the rkey to invalidate
	fSolicited = 1 << 4
	fCAS       = 1 << 5 // atomic: compare-and-swap (else fetch-and-add)
	fAck       = 1 << 6 // the requester waits for this record's acknowledgement (see deferAck)
)

// errCorrupt is ring.ErrCorrupt.
var errCorrupt = ring.ErrCorrupt
