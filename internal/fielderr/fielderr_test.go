package fielderr

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestListAndAll(t *testing.T) {
	l := New("pkg", map[string]string{"QueueSize": "queue size"})
	if l.Err() != nil {
		t.Fatalf("empty list: %v, want nil", l.Err())
	}
	l.Add("QueueSize", "must be at least %d, got %d", 0, -1)
	l.Add("Other", "is bad")
	err := fmt.Errorf("wrapped: %w", errors.Join(l.Err(), errors.New("plain")))

	fields, other := All(err)
	var got []string
	for _, f := range fields {
		got = append(got, f.Field+"|"+f.Error()+"|"+f.Named("--flag"))
	}
	want := []string{
		"QueueSize|pkg: queue size must be at least 0, got -1|--flag must be at least 0, got -1",
		"Other|pkg: Other is bad|--flag is bad",
	}
	// fmt.Errorf("%w") of a join is not itself a join: All must see through the wrapper too.
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fields = %q\nwant %q", got, want)
	}
	if len(other) != 1 || other[0].Error() != "plain" {
		t.Fatalf("other = %v, want [plain]", other)
	}
	if f, o := All(nil); f != nil || o != nil {
		t.Fatalf("All(nil) = %v, %v", f, o)
	}
}
