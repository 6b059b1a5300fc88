package rpma

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mapping is a file mapped into memory (MAP_SHARED): registered with
// Peer.RegMR, its bytes are the file's, and a FlushPersistent that a
// goverbs peer executes on the region writes them back to the file (msync)
// before it completes.
type Mapping struct {
	f *os.File
	b []byte
}

// MapFile maps the first size bytes of the file at path, creating it and
// extending it to size bytes if needed. It returns ErrInval for a size that
// is not positive and ErrProvider when the file cannot be opened or mapped.
func MapFile(path string, size int) (*Mapping, error) {
	if size <= 0 {
		return nil, wrap(ErrInval, "mapping of %d bytes", size)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, provider("open", err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() < int64(size) {
		err = f.Truncate(int64(size))
	}
	if err != nil {
		f.Close()
		return nil, provider("size "+path, err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, provider("mmap "+path, err)
	}
	return &Mapping{f: f, b: b}, nil
}

// Bytes returns the mapped memory.
func (m *Mapping) Bytes() []byte { return m.b }

// Close unmaps the file (deregister regions on it first) and closes it. A
// second Close returns nil (see package verbs, Errors).
func (m *Mapping) Close() error {
	if m.b == nil {
		return nil
	}
	err := syscall.Munmap(m.b)
	m.b = nil
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Sync writes n bytes of the mapping at off back to the file (msync with
// MS_SYNC on the pages that hold them): the local counterpart of a
// persistent flush. It returns ErrInval for a range outside the mapping.
func (m *Mapping) Sync(off, n int) error {
	if err := checkRange("sync", off, n, uint64(len(m.b))); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	ps := os.Getpagesize()
	start := off &^ (ps - 1)
	if err := unix.Msync(m.b[start:off+n], unix.MS_SYNC); err != nil {
		return provider("msync", err)
	}
	return nil
}
