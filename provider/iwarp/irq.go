package iwarp

import "sync"

// respKind is the kind of a response queued for the transmit goroutine.
type respKind uint8

const (
	respRead respKind = iota
	respAtomic
)

// resp is an inbound Read or Atomic Request waiting for its response.
type resp struct {
	kind  respKind
	src   []byte
	stag  uint32
	to    uint64
	reqID uint32
	orig  uint64
}

// irq is the inbound read queue: the peer's Read and Atomic Requests whose
// responses the transmit goroutine has yet to send, bounded by IRD (a peer
// that goes beyond it is terminated). The receive side adds, the transmit
// goroutine takes.
type irq struct {
	mu   sync.Mutex
	q    []resp
	head int
}

// len returns the number of queued requests.
func (r *irq) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q) - r.head
}

// push queues a request.
func (r *irq) push(x resp) {
	r.mu.Lock()
	if r.head > 0 && (r.head == len(r.q) || len(r.q) == cap(r.q)) {
		// Reuse the space of what was taken instead of growing: the queue
		// never holds more than IRD requests.
		n := copy(r.q, r.q[r.head:])
		clear(r.q[n:])
		r.q, r.head = r.q[:n], 0
	}
	r.q = append(r.q, x)
	r.mu.Unlock()
}

// pop takes the oldest request. It leaves the queue before its response is
// written: once the requester has the response it may send the next
// request, which must find room.
func (r *irq) pop() (x resp, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.head == len(r.q) {
		return x, false
	}
	x = r.q[r.head]
	r.q[r.head] = resp{}
	r.head++
	return x, true
}
