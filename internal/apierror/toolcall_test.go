package apierror_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/toolcall"
)

// A request with tools for a model without a tool-call parser is a 400 naming tools on REST and
// InvalidArgument on RPC, not raw text later.
func TestRequireToolParserOnTheWire(t *testing.T) {
	e := apierror.From(toolcall.RequireToolParser("qwen3-8b", true, ""))
	rec := httptest.NewRecorder()
	e.WriteHTTP(rec)
	if rec.Code != http.StatusBadRequest || e.Param != "tools" || e.Code != apierror.CodeInvalidRequest {
		t.Fatalf("REST %d param %q code %q, want 400 naming tools: %s", rec.Code, e.Param, e.Code, rec.Body)
	}
	if c := e.Connect().Code(); c != connect.CodeInvalidArgument {
		t.Fatalf("RPC code %v, want InvalidArgument", c)
	}
}
