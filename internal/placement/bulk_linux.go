package placement

import (
	"syscall"
	"unsafe"
)

// mapHuge maps n+hugeBytes anonymous bytes and returns the mapping (whole, for unmapHuge) and its
// n bytes from the first hugeBytes boundary (part), advised to be backed by huge pages; both nil if
// the system refuses. The unaligned ends are never touched, so they cost address space only.
func mapHuge(n int) (whole, part []byte) {
	whole, err := syscall.Mmap(-1, 0, n+hugeBytes, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil
	}
	off := 0
	if r := int(uintptrOf(whole) % hugeBytes); r != 0 {
		off = hugeBytes - r
	}
	part = whole[off : off+n : off+n]
	// Refused where transparent huge pages are off: the memory then has ordinary pages, still out of
	// the collector's way.
	_ = syscall.Madvise(part, syscall.MADV_HUGEPAGE)
	return whole, part
}

// unmapHuge unmaps what mapHuge mapped. It fails only for a slice mapHuge did not return, a bug.
func unmapHuge(whole []byte) {
	if err := syscall.Munmap(whole); err != nil {
		panic("placement: unmap of a tree's memory: " + err.Error())
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
