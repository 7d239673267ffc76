package apierror_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
)

// The feature rejections keep the contract's codes, with their own messages.
func TestFromFeatureRejections(t *testing.T) {
	for _, tt := range []struct {
		err      error
		code, in string
	}{
		{fmt.Errorf("%w: %w: %w", admission.ErrRejected, admission.ErrQueueTimeout, admission.ErrPredictedTimeout), apierror.CodeQueueTimeout, "predicted wait"},
		{fmt.Errorf("%w: %w: %w", admission.ErrRejected, admission.ErrQueueFull, admission.ErrDisplaced), apierror.CodeQueueFull, "higher-priority"},
		// The same refusals when the decode side holds the request back name decode.
		{fmt.Errorf("%w: %w: %w", admission.ErrRejected, admission.ErrDecodeQueueTimeout, admission.ErrPredictedTimeout), apierror.CodeDecodeQueueTimeout, "predicted wait for a decode seat"},
		{fmt.Errorf("%w: %w: %w", admission.ErrRejected, admission.ErrDecodeQueueFull, admission.ErrDisplaced), apierror.CodeDecodeQueueFull, "higher-priority"},
	} {
		e := apierror.From(tt.err)
		if e.Status != http.StatusTooManyRequests || e.Code != tt.code || !strings.Contains(e.Message, tt.in) {
			t.Errorf("From(%v) = %d %s %q", tt.err, e.Status, e.Code, e.Message)
		}
	}
}
