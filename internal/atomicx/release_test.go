package atomicx

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestReleaseStores(t *testing.T) {
	var a uint64
	Release64(&a, 0x0123456789abcdef)
	if a != 0x0123456789abcdef {
		t.Fatalf("stored %#x", a)
	}
}

// TestMessagePassing is the litmus test of release order: a reader that
// sees the flag a writer released sees the data written before it.
func TestMessagePassing(t *testing.T) {
	const n = 100000
	var data [2]uint64
	var flag uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= n; i++ {
			for atomic.LoadUint64(&flag) != 2*i-1 { // the reader took the previous one
			}
			data[0] = i
			data[1] = i * 3
			Release64(&flag, 2*i)
		}
	}()
	for i := uint64(1); i <= n; i++ {
		Release64(&flag, 2*i-1)
		for atomic.LoadUint64(&flag) != 2*i {
		}
		if d0, d1 := data[0], data[1]; d0 != i || d1 != 3*i {
			t.Fatalf("message %d: saw data %d, %d", i, d0, d1)
		}
	}
	wg.Wait()
}

func TestReleaseU64(t *testing.T) {
	var v atomic.Uint64
	ReleaseU64(&v, 42)
	if v.Load() != 42 {
		t.Fatalf("stored %d", v.Load())
	}
}
