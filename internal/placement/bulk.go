package placement

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// A big tree's nodes and text live outside the Go heap, in memory mapped with 2 MiB (huge) pages
// where the platform gives them (bulk_linux.go; elsewhere they stay on the heap).
//
// Why: a pick walks a few nodes and labels at random places in tens of megabytes, and each is a
// cache miss. With 4 KiB pages most are a TLB miss as well, and under virtualisation a TLB miss is a
// walk of two page tables. On a 2-vCPU VM (sluice-bench scenario overhead --paired-only, one
// gateway's tree growing through the run) huge pages took sluice-pd / bare-pd from 1.17 to 1.13,
// two thirds of what the tree costs the request (a tree kept small, or round robin: 1.10). Off the
// heap, the tree also stops counting towards the GC's target: at GOGC=400 every byte of tree let
// the heap grow by four bytes of garbage before a collection.
//
// A tree's first few chunks stay on the heap (most trees are small, and a huge page costs 2 MiB
// the moment it is touched); only what grows past them is mapped. The mappings are the tree's: they
// are unmapped when the tree is dropped (a runtime cleanup) or, for text, when a chunk empties.

const (
	// hugeBytes is a mapping's unit: one huge page, and its alignment.
	hugeBytes = 2 << 20
	// heapNodeChunks is how many node chunks (32,768 nodes) a tree keeps on the heap before it maps.
	heapNodeChunks = 8
	// heapTextChunks is how many text chunks (2 MiB) a tree's text keeps on the heap before it maps.
	heapTextChunks = 2
)

// bulkMem is a tree's mapped memory. Its methods run under the tree's lock, and release only once
// no one can reach the tree.
type bulkMem struct {
	// maps holds each mapping's whole slice (as the system returned it, for unmap), by the first
	// byte of its aligned part.
	maps map[*byte][]byte
	// mapped, when not nil, counts the bytes mapped (the trees of one policy share it; it is read by
	// another goroutine, so it is atomic).
	mapped *atomic.Int64
}

// newBulkMem returns owner's mapped memory, to be unmapped when owner is unreachable.
func newBulkMem(owner *tree, mapped *atomic.Int64) *bulkMem {
	m := &bulkMem{maps: make(map[*byte][]byte), mapped: mapped}
	runtime.AddCleanup(owner, (*bulkMem).release, m)
	return m
}

// alloc returns n zeroed bytes (n a multiple of hugeBytes) aligned to hugeBytes outside the heap,
// or nil where none can be mapped (the caller then allocates on the heap).
func (m *bulkMem) alloc(n int) []byte {
	whole, part := mapHuge(n)
	if part == nil {
		return nil
	}
	m.maps[unsafe.SliceData(part)] = whole
	if m.mapped != nil {
		m.mapped.Add(int64(len(whole)))
	}
	return part
}

// free unmaps b (a slice of an aligned part alloc returned, from its first byte) and reports
// whether it was mapped; a heap slice is left to the collector.
func (m *bulkMem) free(b []byte) bool {
	if m == nil || cap(b) == 0 {
		return false
	}
	p := unsafe.SliceData(b[:1])
	whole, ok := m.maps[p]
	if !ok {
		return false
	}
	delete(m.maps, p)
	m.unmap(whole)
	return true
}

// owns reports whether b starts a mapped part.
func (m *bulkMem) owns(b []byte) bool {
	if m == nil || cap(b) == 0 {
		return false
	}
	_, ok := m.maps[unsafe.SliceData(b[:1])]
	return ok
}

func (m *bulkMem) unmap(whole []byte) {
	unmapHuge(whole)
	if m.mapped != nil {
		m.mapped.Add(-int64(len(whole)))
	}
}

// release unmaps everything: the tree is unreachable.
func (m *bulkMem) release() {
	for p, whole := range m.maps {
		delete(m.maps, p)
		m.unmap(whole)
	}
}
