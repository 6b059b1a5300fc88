package rpma

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goverbs/goverbs/verbs"
)

// Op is the type of a completed operation (enum rpma_op).
type Op int

// Operation types, in librpma's order.
const (
	OpRead Op = iota
	OpWrite
	OpFlush
	OpSend
	OpRecv
	OpRecvRDMAWithImm
)

var opNames = [...]string{"READ", "WRITE", "FLUSH", "SEND", "RECV", "RECV_RDMA_WITH_IMM"}

// String names the operation, e.g. "FLUSH".
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Completion is a completed operation (struct rpma_completion). When Status
// is not verbs.WCSuccess only OpContext is valid.
type Completion struct {
	OpContext uint64 // the op context given when the operation was posted
	Op        Op
	ByteLen   uint32
	Status    verbs.WCStatus
	Flags     verbs.WCFlags // as ibv_poll_cq's wc_flags
	Imm       uint32        // immediate data, in host byte order
}

// CQ is a completion queue of a connection or an SRQ (struct rpma_cq).
//
// Wait for completions with Wait (or epoll on Fd), then take them with
// GetWC or GetCompletion until they return ErrNoCompletion. A CQ whose
// connection shares one completion channel between its CQ and its receive
// CQ is waited for with Conn.Wait instead.
type CQ struct {
	cq     *verbs.CQ
	ch     *verbs.CompChannel
	shared bool
	ownCh  bool

	mu sync.Mutex
	// reads records, in posting order, the signaled RDMA Reads of the QP
	// whose send CQ this is: true for a Read that is a flush (the
	// read-after-write fallback). Successful Read completions come in
	// posting order, so the head names the next one.
	reads []bool
}

// newCQ creates a CQ of size entries on ctx with its own channel, or on ch
// when ch is not nil (shared), armed for the first completion.
func newCQ(ctx *verbs.Context, size int, ch *verbs.CompChannel) (*CQ, error) {
	c := &CQ{ch: ch, shared: ch != nil}
	if ch == nil {
		var err error
		if c.ch, err = ctx.CreateCompChannel(); err != nil {
			return nil, provider("ibv_create_comp_channel", err)
		}
		c.ownCh = true
	}
	cq, err := ctx.CreateCQ(max(size, 1), c.ch)
	if err != nil {
		if c.ownCh {
			c.ch.Close()
		}
		return nil, provider("ibv_create_cq", err)
	}
	c.cq = cq
	if err := cq.ReqNotify(false); err != nil {
		c.destroy()
		return nil, provider("ibv_req_notify_cq", err)
	}
	return c, nil
}

func (c *CQ) destroy() error {
	// Acknowledge nothing is pending: Wait acknowledges each event it takes.
	err := c.cq.Destroy()
	if c.ownCh {
		c.ch.Close()
	}
	if err != nil {
		return provider("ibv_destroy_cq", err)
	}
	return nil
}

// Verbs returns the underlying verbs CQ.
func (c *CQ) Verbs() *verbs.CQ { return c.cq }

// Fd returns the file descriptor of the CQ's completion channel, readable
// when Wait would not block (rpma_cq_get_fd). It returns ErrSharedChannel
// when the channel is shared (use Conn.CompletionFd).
func (c *CQ) Fd() (int, error) {
	if c == nil {
		return -1, wrap(ErrInval, "nil CQ")
	}
	if c.shared {
		return -1, wrap(ErrSharedChannel, "the CQ shares its connection's completion channel")
	}
	return c.ch.Fd(), nil
}

// Wait blocks until the CQ signals a completion (rpma_cq_wait), then
// re-arms it. Take the completions with GetWC or GetCompletion until they
// report ErrNoCompletion before waiting again. It returns
// ErrSharedChannel when the channel is shared (use Conn.Wait), and an
// error wrapping ErrNoCompletion and ctx's error when ctx ends first.
func (c *CQ) Wait(ctx context.Context) error {
	if c == nil {
		return wrap(ErrInval, "nil CQ")
	}
	if c.shared {
		return wrap(ErrSharedChannel, "the CQ shares its connection's completion channel")
	}
	got, err := c.ch.GetEvent(ctx)
	if err != nil {
		return waitErr(err)
	}
	return rearm(c.ch, got)
}

func waitErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("rpma: %w: %w", ErrNoCompletion, err)
	}
	return provider("ibv_get_cq_event", err)
}

func rearm(ch *verbs.CompChannel, cq *verbs.CQ) error {
	ch.AckEvents(cq, 1)
	if err := cq.ReqNotify(false); err != nil {
		return provider("ibv_req_notify_cq", err)
	}
	return nil
}

// GetWC moves up to len(wc) completions into wc and returns how many
// (rpma_cq_get_wc). WRID is the op context; the opcodes are those of verbs
// (a flush done as a read-after-write completes as RDMA_READ, a native one
// as FLUSH). It returns ErrInval for a nil CQ or an empty wc,
// ErrNoCompletion when there is none, and ErrProvider when polling fails.
func (c *CQ) GetWC(wc []verbs.WC) (int, error) {
	if c == nil || len(wc) == 0 {
		return 0, wrap(ErrInval, "nil CQ or no room for completions")
	}
	c.mu.Lock()
	n, err := c.cq.Poll(wc)
	for i := range wc[:n] {
		if wc[i].Status == verbs.WCSuccess && wc[i].Opcode == verbs.WCRDMARead && len(c.reads) > 0 {
			c.reads = c.reads[1:]
		}
	}
	c.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	if err != nil {
		return 0, pollErr(err)
	}
	return 0, wrap(ErrNoCompletion, "the CQ is empty")
}

// GetCompletion takes the next completion into cmpl
// (rpma_cq_get_completion). Operations posted with CompletionAlways
// complete on success and on error; those posted with CompletionOnError
// only on error. On a connection with a receive CQ, receives complete on
// the receive CQ only. It returns ErrInval when c or cmpl is nil,
// ErrNoCompletion when there is none, ErrProvider when polling fails, and
// ErrNoSupp for a completion of an operation librpma does not post (its op
// context is still stored in cmpl).
func (c *CQ) GetCompletion(cmpl *Completion) error {
	if c == nil || cmpl == nil {
		return wrap(ErrInval, "nil CQ or completion")
	}
	var wc [1]verbs.WC
	c.mu.Lock()
	n, err := c.cq.Poll(wc[:])
	flush := false
	if n == 1 && wc[0].Status == verbs.WCSuccess && wc[0].Opcode == verbs.WCRDMARead && len(c.reads) > 0 {
		flush = c.reads[0]
		c.reads = c.reads[1:]
	}
	c.mu.Unlock()
	if n == 0 {
		if err != nil {
			return pollErr(err)
		}
		return wrap(ErrNoCompletion, "the CQ is empty")
	}
	w := &wc[0]
	*cmpl = Completion{OpContext: w.WRID, Status: w.Status}
	if w.Status != verbs.WCSuccess {
		return nil
	}
	switch w.Opcode {
	case verbs.WCRDMARead:
		cmpl.Op = OpRead
		if flush {
			cmpl.Op = OpFlush
		}
	case verbs.WCRDMAWrite, verbs.WCAtomicWrite:
		cmpl.Op = OpWrite
	case verbs.WCFlush:
		cmpl.Op = OpFlush
	case verbs.WCSend:
		cmpl.Op = OpSend
	case verbs.WCRecv:
		cmpl.Op = OpRecv
	case verbs.WCRecvRDMAWithImm:
		cmpl.Op = OpRecvRDMAWithImm
	default:
		logAt(LogError, "unsupported completion opcode", "opcode", w.Opcode)
		return wrap(ErrNoSupp, "completion opcode %v", w.Opcode)
	}
	cmpl.ByteLen, cmpl.Flags = w.ByteLen, w.Flags
	if w.Flags&verbs.WCFlagWithImm != 0 {
		cmpl.Imm = w.ImmData
	}
	return nil
}

// verbsErrors are the errors by which the verbs layer names what failed.
var verbsErrors = []error{verbs.ErrInvalid, verbs.ErrNotSupported, verbs.ErrQueueFull, verbs.ErrNoMemory,
	verbs.ErrInvalidState, verbs.ErrBusy, verbs.ErrClosed, verbs.ErrNoCompletion, verbs.ErrNoDevice, verbs.ErrCQOverflow}

// pollErr classifies a failed poll as librpma does: RPMA_E_PROVIDER when
// the provider named the error (here: a verbs error), RPMA_E_UNKNOWN when
// it did not.
func pollErr(err error) error {
	for _, v := range verbsErrors {
		if errors.Is(err, v) {
			return provider("ibv_poll_cq", err)
		}
	}
	logAt(LogError, "ibv_poll_cq failed without a provider error", "err", err)
	return fmt.Errorf("rpma: %w: ibv_poll_cq: %w", ErrUnknown, err)
}

// noteRead records a signaled Read posted on the QP whose send CQ this is;
// c.mu is held.
func (c *CQ) noteRead(isFlush bool) { c.reads = append(c.reads, isFlush) }
