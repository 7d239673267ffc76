// Package enginebook keeps, by engine, what is being read from each one (a stream, a generation), so
// that all of one engine's can be acted on at once: a drain moves them elsewhere.
package enginebook

import "sync"

// Book holds values by engine key (scheme://host:port). The zero Book is ready to use; it is safe for
// concurrent use.
type Book[T comparable] struct {
	mu sync.Mutex
	m  map[string]map[T]struct{}
}

// Add records v as read from engine; the returned func forgets it (calling it more is harmless).
func (b *Book[T]) Add(engine string, v T) (remove func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]map[T]struct{}{}
	}
	set := b.m[engine]
	if set == nil {
		set = map[T]struct{}{}
		b.m[engine] = set
	}
	set[v] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.m[engine], v)
		if len(b.m[engine]) == 0 {
			delete(b.m, engine)
		}
	}
}

// Of returns what is recorded for engine now, a copy the caller may act on without the book's lock.
func (b *Book[T]) Of(engine string) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]T, 0, len(b.m[engine]))
	for v := range b.m[engine] {
		out = append(out, v)
	}
	return out
}

// Len is how many values are recorded for engine now.
func (b *Book[T]) Len(engine string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m[engine])
}
