package rsocketbench

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkCopyCeiling measures what any stream between two threads on
// different CPUs can reach on this machine when each byte is copied twice
// (into shared memory by the writer, out of it by the reader), as over
// rsocket-shm and a Unix socket: the bound of "large transfers" there. The
// two threads are pinned to CPUs 0 and 1 and share a memfd mapping, with
// nothing else (no protocol, no wake-ups: both spin on a counter).
//
//   - pipelined: a ring of four 128 KiB slots (rsocket's receive buffer is
//     512 KiB), the writer filling one while the reader empties another:
//     a stream.
//   - serial: the writer copies a whole message, then the reader: a
//     ping-pong's one direction, with no overlap.
//   - one-core: both copies on one thread (the data never changes CPU).
func BenchmarkCopyCeiling(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs")
	}
	for _, c := range []struct {
		name             string
		msg, ring, chunk int
	}{
		{"pipelined", 1 << 20, 512 << 10, 128 << 10},
		{"serial", 1 << 20, 1 << 20, 1 << 20},
		{"pipelined", 64 << 10, 512 << 10, 16 << 10},
		{"serial", 64 << 10, 64 << 10, 64 << 10},
	} {
		b.Run(fmt.Sprintf("%s/%d", c.name, c.msg), func(b *testing.B) { crossCore(b, c.msg, c.ring, c.chunk) })
	}
	for _, msg := range []int{1 << 20, 64 << 10} {
		b.Run(fmt.Sprintf("one-core/%d", msg), func(b *testing.B) {
			ring, err := sharedBuf(512 << 10)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Munmap(ring)
			src, dst := make([]byte, msg), make([]byte, msg)
			b.SetBytes(int64(msg))
			for range b.N {
				for off := 0; off < len(src); off += len(ring) {
					copy(ring, src[off:])
					copy(dst[off:], ring[:min(len(ring), msg)])
				}
			}
		})
	}
}

// crossCore streams messages of msg bytes through a shared ring of
// ringSize bytes in chunks: the writer on CPU 0, the reader on CPU 1.
func crossCore(b *testing.B, msg, ringSize, chunk int) {
	ring, err := sharedBuf(ringSize)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(ring)
	slots := int64(ringSize / chunk)
	per := int64(msg / chunk) // chunks per message
	var written, read atomic.Int64
	done := make(chan error)
	n := int64(b.N) * per
	go func() {
		done <- pinned(1, func() {
			dst := make([]byte, msg)
			for i := range n {
				for written.Load() <= i {
				}
				s := int(i % slots)
				copy(dst[int(i%per)*chunk:], ring[s*chunk:(s+1)*chunk])
				read.Store(i + 1)
			}
		})
	}()
	b.SetBytes(int64(msg))
	b.ResetTimer()
	err = pinned(0, func() {
		src := make([]byte, msg)
		for i := range n {
			for i-read.Load() >= slots {
			}
			s := int(i % slots)
			copy(ring[s*chunk:(s+1)*chunk], src[int(i%per)*chunk:])
			written.Store(i + 1)
		}
	})
	if err2 := <-done; err == nil {
		err = err2
	}
	if err != nil {
		b.Fatal(err)
	}
}

// pinned runs f on a thread bound to cpu.
func pinned(cpu int, f func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, s unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	s.Set(cpu)
	if err := unix.SchedSetaffinity(0, &s); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	f()
	return nil
}

// sharedBuf maps n bytes of a memfd shared, as provider/shm maps regions.
func sharedBuf(n int) ([]byte, error) {
	fd, err := unix.MemfdCreate("goverbs-bench", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, err
	}
	return unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}
