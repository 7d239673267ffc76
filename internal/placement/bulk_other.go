//go:build !linux

package placement

// mapHuge maps nothing here: trees stay on the heap.
func mapHuge(int) (whole, part []byte) { return nil, nil }

func unmapHuge([]byte) {}
