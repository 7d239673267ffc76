package enginebook

import (
	"slices"
	"sync"
	"testing"
)

func TestBook(t *testing.T) {
	var b Book[int]
	rm1 := b.Add("grpc://a:1", 1)
	rm2 := b.Add("grpc://a:1", 2)
	b.Add("grpc://b:1", 3)
	if n := b.Len("grpc://a:1"); n != 2 {
		t.Fatalf("Len(a) = %d, want 2", n)
	}
	got := b.Of("grpc://a:1")
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Of(a) = %v, want [1 2]", got)
	}
	rm1()
	rm1() // harmless
	if got := b.Of("grpc://a:1"); !slices.Equal(got, []int{2}) {
		t.Fatalf("after removing 1: %v", got)
	}
	rm2()
	if got := b.Of("grpc://a:1"); len(got) != 0 || len(b.m) != 1 || b.Len("grpc://a:1") != 0 {
		t.Fatalf("after removing 2: %v, %d engines kept", got, len(b.m))
	}
}

// Adds, removes and reads from many goroutines: -race checks the locking.
func TestBookConcurrent(t *testing.T) {
	var b Book[int]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				rm := b.Add("e", i*1000+j)
				_ = b.Of("e")
				rm()
			}
		})
	}
	wg.Wait()
	if got := b.Of("e"); len(got) != 0 {
		t.Fatalf("%d left", len(got))
	}
}
