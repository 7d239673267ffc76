package worker

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkRoutable(b *testing.B) {
	reg := NewRegistry(RegistryOptions{StartReady: true})
	w, _ := reg.Add(Spec{URL: "http://a:1"})
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if !w.Routable(now) {
			b.Fatal("not routable")
		}
	}
}

func BenchmarkLoadGuard(b *testing.B) {
	reg := NewRegistry(RegistryOptions{})
	w, _ := reg.Add(Spec{URL: "http://a:1"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.AcquireLoad().Release()
		}
	})
}

func BenchmarkBreakerRecordSuccess(b *testing.B) {
	br := NewBreaker(DefaultBreakerConfig(), nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			br.RecordSuccess()
		}
	})
}

func BenchmarkSnapshotCandidates(b *testing.B) {
	reg := NewRegistry(RegistryOptions{})
	for i := range 100 {
		_, _ = reg.Add(Spec{URL: fmt.Sprintf("http://w%d:1", i), Role: RolePrefill, Models: []string{"m"}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(reg.Snapshot().Candidates(RolePrefill, "m")) != 100 {
			b.Fatal("wrong count")
		}
	}
}

func BenchmarkRegistryAdd(b *testing.B) {
	// Cost of a change with 100 workers registered (snapshot rebuild).
	reg := NewRegistry(RegistryOptions{})
	for i := range 100 {
		_, _ = reg.Add(Spec{URL: fmt.Sprintf("http://w%d:1", i), Role: RolePrefill, Models: []string{"m"}})
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w, err := reg.Add(Spec{URL: fmt.Sprintf("http://x%d:1", i), Role: RolePrefill, Models: []string{"m"}})
		if err != nil {
			b.Fatal(err)
		}
		_ = reg.Remove(w.ID())
		i++
	}
}
