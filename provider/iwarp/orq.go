package iwarp

import (
	"sync"

	"github.com/goverbs/goverbs/internal/engine"
)

// orqEntry is an outstanding RDMA Read or atomic that we issued.
type orqEntry struct {
	w      *engine.WQE
	seq    uint64
	atomic bool
	sink   [][]byte // where the response goes (its backing array stays with the slot)
	size   uint32
	stag   uint32 // the sink STag and TO sent in the Read Request
	to     uint64
	got    uint32
}

// orq is the outbound read queue: the Reads and atomics we issued, in
// issue order, which is the order their responses come in. The engine
// bounds it by ORD; a ring that grows when full (ORD 0 means no bound) and
// keeps its slots' sink arrays, so that issuing a Read allocates nothing.
// The transmitter adds at the tail, the receive side takes from the head.
type orq struct {
	mu      sync.Mutex
	ring    []orqEntry
	head, n int
	reqID   uint32 // the last Atomic Request's ReqID
}

// slot returns the tail slot for the caller to fill, then to add with
// push; only the transmitter (one goroutine at a time) calls them.
func (o *orq) slot() *orqEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == len(o.ring) {
		ring := make([]orqEntry, max(4, 2*len(o.ring)))
		for i := range o.n {
			ring[i] = o.ring[(o.head+i)%len(o.ring)]
		}
		o.ring, o.head = ring, 0
	}
	return &o.ring[(o.head+o.n)%len(o.ring)]
}

// push adds the slot filled since slot.
func (o *orq) push() {
	o.mu.Lock()
	o.n++
	o.mu.Unlock()
}

// nextReqID numbers an Atomic Request.
func (o *orq) nextReqID() uint32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reqID++
	return o.reqID
}

// front returns the oldest entry, or nil; o.mu is held.
func (o *orq) front() *orqEntry {
	if o.n == 0 {
		return nil
	}
	return &o.ring[o.head]
}

// pop removes the oldest entry and returns it; ok is false when there is
// none, or when it is not of the kind asked for (atomic or not). An
// atomic's result is copied into its sink first: once popped, the slot and
// its sink array may be reused by the next request.
func (o *orq) pop(atomic bool, result []byte) (e orqEntry, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := o.front()
	if f == nil || f.atomic != atomic {
		return e, false
	}
	if result != nil {
		engine.CopyInto(f.sink, 0, result)
	}
	e = *f
	e.sink = nil
	f.w, f.sink = nil, f.sink[:0] // the array stays for the slot's next use
	o.head = (o.head + 1) % len(o.ring)
	o.n--
	return e, true
}

// findRead returns the outstanding Read whose sink is stag/to.
func (o *orq) findRead(stag uint32, to uint64) (w *engine.WQE, seq uint64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.n {
		if e := &o.ring[(o.head+i)%len(o.ring)]; !e.atomic && e.stag == stag && e.to == to {
			return e.w, e.seq, true
		}
	}
	return nil, 0, false
}
