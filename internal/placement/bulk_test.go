package placement

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestNodeHoldsNoPointer: nodes may live in memory the collector does not scan (bulk.go), so a
// pointer in one would be a pointer the collector never sees.
func TestNodeHoldsNoPointer(t *testing.T) {
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				walk(ty.Field(i).Type, path+"."+ty.Field(i).Name)
			}
		case reflect.Array:
			walk(ty.Elem(), path+"[]")
		case reflect.Pointer, reflect.UnsafePointer, reflect.Slice, reflect.Map, reflect.String,
			reflect.Interface, reflect.Func, reflect.Chan:
			t.Errorf("node%s is a %s: mapped nodes must hold no pointer", path, ty.Kind())
		}
	}
	walk(reflect.TypeFor[node](), "")
}

// bigTree inserts n unique prompts of 256 bytes for tenants 0 and 1 into a tree whose
// mapped bytes mapped counts, and returns it with its prompts.
func bigTree(t *testing.T, n int, mapped *atomic.Int64) (*tree, []string) {
	t.Helper()
	tr := &tree{mapped: mapped}
	words := threeLetterWords(rand.New(rand.NewPCG(9, 9)))
	prompts := make([]string, n)
	for i := range prompts {
		prompts[i] = words()
		tr.insert(prompts[i], int32(i%2))
	}
	return tr, prompts
}

// TestBigTreeMapsItsBulk: a tree grown past its heap chunks keeps its further nodes and text in
// mapped memory, matches every prompt as before, keeps its invariants through eviction (which unmaps
// emptied text), and gives all of it back once dropped.
func TestBigTreeMapsItsBulk(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("trees map memory on Linux only")
	}
	var mapped atomic.Int64
	tr, prompts := bigTree(t, 40000, &mapped)
	if len(tr.nodes) <= heapNodeChunks || len(tr.txt.chunks) <= heapTextChunks {
		t.Fatalf("%d node chunks, %d text chunks: the tree did not grow past its heap ones", len(tr.nodes), len(tr.txt.chunks))
	}
	if got := mapped.Load(); got < 2*hugeBytes {
		t.Fatalf("mapped %d bytes: the bulk stayed on the heap", got)
	}
	for _, c := range tr.nodes[heapNodeChunks:] {
		if !tr.mem.ownsAddr(c) {
			t.Fatal("a node chunk past the heap ones is not in a mapping")
		}
	}
	checkTree(t, tr)
	for i, p := range prompts {
		id := int32(i % 2)
		if m, _ := tr.match(p, func(x int32) bool { return x == id }); m != len(p) {
			t.Fatalf("prompt %d: matched %d of %d bytes", i, m, len(p))
		}
	}

	full := mapped.Load()
	tr.evict(tr.size[0] / 8) // most text goes: chunks empty and are unmapped, or swept
	for range 64 {
		tr.evict(tr.size[0])
	}
	checkTree(t, tr)
	if got := mapped.Load(); got >= full {
		t.Fatalf("mapped %d bytes after evicting seven eighths, %d before: no text chunk was unmapped", got, full)
	}

	tr = nil
	deadline := time.Now().Add(10 * time.Second)
	for mapped.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still mapped 10 s after the tree was dropped", mapped.Load())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the cleanup runs on the runtime's goroutine: poll it
	}
}

// TestSetCountsMappedBytes: a PD set's shared trees are counted once.
func TestSetCountsMappedBytes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("trees map memory on Linux only")
	}
	cfg := DefaultConfig()
	set, err := NewSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, dc := newPDFleet(t, 1, 1)
	words := threeLetterWords(rand.New(rand.NewPCG(4, 4)))
	for range 40000 {
		r := &Request{Model: "m", Text: words(), TargetWorker: -1}
		set.Prefill.Pick(pc, r)
		set.Decode.Pick(dc, r)
	}
	ca := set.Prefill.(*CacheAware)
	want := ca.trees.mapped.Load()
	if want == 0 {
		t.Fatal("40,000 prompts mapped nothing")
	}
	if got := set.MappedBytes(); got != want {
		t.Fatalf("MappedBytes %d, the shared trees mapped %d", got, want)
	}
}

// ownsAddr reports whether p lies in one of m's mappings.
func (m *bulkMem) ownsAddr(p *nodeChunk) bool {
	a := uintptr(unsafe.Pointer(p))
	for _, whole := range m.maps {
		if s := uintptr(unsafe.Pointer(unsafe.SliceData(whole))); a >= s && a < s+uintptr(len(whole)) {
			return true
		}
	}
	return false
}
