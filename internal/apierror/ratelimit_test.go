package apierror_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicegw/sluice/internal/apierror"
)

// A tenant's refusal carries the REST headers as RPC metadata, Retry-After in whole seconds, and the
// exact delay as RetryInfo; an error without them adds neither.
func TestConnectCarriesRateLimitMetadata(t *testing.T) {
	e := apierror.New(http.StatusTooManyRequests, apierror.CodeRateLimitExceeded, "spent", nil).WithRetryAfter(1500 * time.Millisecond)
	e.Header = http.Header{"X-Ratelimit-Limit-Tokens": {"1000"}} // Retry-After-Ms comes with the retry hint
	ce := e.Connect()
	if got := ce.Meta(); got.Get("X-Ratelimit-Limit-Tokens") != "1000" || got.Get("Retry-After-Ms") != "1500" || got.Get("Retry-After") != "2" {
		t.Errorf("metadata %v, want the rate-limit headers and Retry-After 2", got)
	}
	var retry time.Duration
	var reason string
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatal(err)
		}
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			retry = v.GetRetryDelay().AsDuration()
		case *errdetails.ErrorInfo:
			reason = v.GetReason()
		}
	}
	if retry != 1500*time.Millisecond || reason != apierror.CodeRateLimitExceeded {
		t.Errorf("RetryInfo %v, reason %q; want 1.5s, rate_limit_exceeded", retry, reason)
	}
	e.Header["X-Ratelimit-Limit-Tokens"][0] = "changed"
	if ce.Meta().Get("X-Ratelimit-Limit-Tokens") != "1000" {
		t.Error("the metadata shares the error's header slices")
	}

	plain := apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "bad", nil).Connect()
	if len(plain.Meta()) != 0 || len(plain.Details()) != 1 {
		t.Errorf("a plain error got metadata %v or %d details", plain.Meta(), len(plain.Details()))
	}
}
