package apierror

import (
	"context"
	"errors"
	"net/http"
)

// From classifies any error. Already classified errors pass through; context errors become 499/504;
// core sentinels map to their documented status and code; anything else is a 500 whose message is
// generic (internal details stay in the logs).
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	if e := fromCore(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return New(http.StatusGatewayTimeout, CodeTimeout, "request timed out", err)
	case errors.Is(err, context.Canceled):
		return New(499, CodeCanceled, "request canceled", err)
	}
	return New(http.StatusInternalServerError, CodeInternal, "internal error", err)
}
