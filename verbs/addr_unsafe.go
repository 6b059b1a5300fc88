package verbs

import "unsafe"

// addrOf returns the address of b's first byte. goverbs uses it only as a
// number (the region's base address); memory is always reached through the
// registered slice.
func addrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
