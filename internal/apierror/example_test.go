package apierror_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
)

// A full admission queue becomes a 429 with OpenAI's error body and a Retry-After rounded up to whole
// seconds.
func ExampleFrom() {
	c, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 0}, admission.Deps{})
	if err != nil {
		panic(err)
	}
	// The only prefill worker is at its limit and the queue holds nobody: rejected at once.
	_, err = c.Acquire(context.Background(), admission.Request{Queue: "llama-3",
		Select: func(func(string) bool) (string, error) { return "", admission.ErrNoCapacity }})

	rec := httptest.NewRecorder()
	apierror.From(err).WithRetryAfter(1500 * time.Millisecond).WriteHTTP(rec)

	fmt.Println(rec.Code, "Retry-After:", rec.Header().Get("Retry-After"))
	fmt.Print(rec.Body.String())
	// Output:
	// 429 Retry-After: 2
	// {"error":{"message":"prefill admission queue is full, retry later","type":"rate_limit_error","param":null,"code":"pd_prefill_queue_full"}}
}
