package dispatch

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// seatedSlot admits one request on a controller with one decode seat and returns it with the
// controller.
func seatedSlot(t *testing.T) (*admission.Controller, *admission.Slot) {
	t.Helper()
	c, err := admission.New(admission.Settings{QueueSize: 0, QueueTimeout: time.Second, DecodeMaxInflightPerWorker: 1}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Acquire(context.Background(), admission.Request{
		Select:     func(func(string) bool) (string, error) { return "P", nil },
		SelectPair: func(_, _ func(string) bool) (string, string, error) { return "P", "D", nil },
	})
	if err != nil || s.Seat() == nil {
		t.Fatalf("acquire: %v (seat %v)", err, s.Seat())
	}
	s.Release(admission.ReleaseCompleted)
	return c, s
}

// TestHoldSeatReleasesOnEveryPath: the decode seat goes back exactly once when the response is closed
// (twice closed: once), when the leg fails, and when it panics; never while the response is open.
func TestHoldSeatReleasesOnEveryPath(t *testing.T) {
	seats := func(c *admission.Controller) int { return c.Status().Seats["D"] }

	c, s := seatedSlot(t)
	resp, err := holdSeat(context.Background(), s.Seat(), func() (*Response, error) {
		return &Response{Body: io.NopCloser(strings.NewReader("data"))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := seats(c); got != 1 {
		t.Fatalf("seat released before the decode ended: %d held", got)
	}
	resp.Body.Close()
	resp.Body.Close()
	if got := seats(c); got != 0 {
		t.Fatalf("seats held after close: %d", got)
	}

	c, s = seatedSlot(t)
	legErr := errors.New("decode failed")
	if _, err := holdSeat(context.Background(), s.Seat(), func() (*Response, error) { return nil, legErr }); !errors.Is(err, legErr) {
		t.Fatalf("err = %v", err)
	}
	if got := seats(c); got != 0 {
		t.Fatalf("seats held after a failed leg: %d", got)
	}

	c, s = seatedSlot(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
		}()
		_, _ = holdSeat(context.Background(), s.Seat(), func() (*Response, error) { panic("adapter bug") })
	}()
	if got := seats(c); got != 0 {
		t.Fatalf("seats held after a panic: %d", got)
	}

	// Seats off: run's answer passes through untouched.
	body := io.NopCloser(strings.NewReader(""))
	resp, _ = holdSeat(context.Background(), nil, func() (*Response, error) { return &Response{Body: body}, nil })
	if resp.Body != body {
		t.Fatal("holdSeat wrapped a response without a seat")
	}
}
