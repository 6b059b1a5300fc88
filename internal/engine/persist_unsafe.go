package engine

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

var pageSize = uintptr(os.Getpagesize())

// persist writes the memory of b back to the file that backs it (msync with
// MS_SYNC on the pages that hold b), so that it survives the process. On
// anonymous memory (the Go heap, memfd buffers) there is no file and msync
// succeeds at once.
func persist(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	start &^= pageSize - 1
	err := msync(start, end-start)
	runtime.KeepAlive(b)
	return err
}

var fenceWord atomic.Uint64

// persistFence orders the stores that placed earlier data before what
// follows (the response), as a full memory barrier.
func persistFence() { fenceWord.Add(1) }

func msync(addr, n uintptr) error {
	if _, _, e := syscall.Syscall(syscall.SYS_MSYNC, addr, n, syscall.MS_SYNC); e != 0 {
		return e
	}
	return nil
}
