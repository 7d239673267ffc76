package dispatch

import (
	"errors"
	"math"
	"net/http"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/tenant"
)

// Per-tenant budgets (Config.Budgets, internal/tenant): a request takes one request and its estimated
// prompt tokens from its tenant's budget when it arrives, before admission, and is refused with 429
// rate_limit_exceeded when either is spent. The refusal carries Retry-After (whole seconds) and
// Retry-After-Ms (as every refusal with a retry hint does), which the official OpenAI SDKs prefer, so their retry waits as long as needed; every
// answer of a tenant with a budget carries OpenAI's x-ratelimit-* headers. The reservation is settled
// on the usage the engine reports when the response ends; a request admission refused used no tokens.

// reserveBudget takes r's share of its tenant's budget: the reservation (nil without a budget) and the
// headers for the answer, or the 429 to send.
func (x *Dispatcher) reserveBudget(r *Request, br *body.Request) (*tenant.Reservation, http.Header, error) {
	if x.cfg.Budgets == nil {
		return nil, nil, nil
	}
	tokens := int64(br.PromptTokenIDs) + int64(math.Ceil(float64(br.PromptChars)/x.charsPerToken()))
	res, q, err := x.cfg.Budgets.Reserve(r.tenant, tokens)
	var d *tenant.Denied
	if errors.As(err, &d) {
		e := apierror.New(http.StatusTooManyRequests, apierror.CodeRateLimitExceeded,
			"this tenant's "+budgetKind(d)+" per minute are spent, retry after the Retry-After delay", err).WithRetryAfter(d.RetryAfter)
		e.Header = q.Header() // Retry-After-Ms comes with Retry-After (apierror)
		return nil, nil, e
	}
	if res == nil {
		return nil, nil, nil
	}
	return res, q.Header(), nil
}

func budgetKind(d *tenant.Denied) string {
	if d.Tokens {
		return "tokens"
	}
	return "requests"
}

// settleFailed ends the reservation of a request that failed: a request admission refused (or
// that never reached an engine) is charged no tokens; any other keeps its reservation, since the
// engine may have done the work.
func settleFailed(res *tenant.Reservation, err error) {
	if errors.Is(err, admission.ErrRejected) {
		res.Settle(0)
		return
	}
	res.Settle(-1)
}

// withRateHeader adds a budgeted tenant's x-ratelimit-* headers to a refusal after its reservation
// (tenant_queue_full, a queue timeout, an engine's failure), since every answer of such a tenant
// carries them; headers the error already has win.
func withRateHeader(err error, h http.Header) error {
	if len(h) == 0 {
		return err
	}
	e := apierror.From(err)
	if e.Header == nil {
		e.Header = http.Header{}
	}
	for k, vs := range h {
		if _, ok := e.Header[k]; !ok {
			e.Header[k] = vs
		}
	}
	return e
}

// rejection is the reason of a refusal by the tenant's budget or by admission (RequestStats.Rejection),
// or "" for any other failure: admission's outcome name, the reason label of
// sluice_pd_prefill_admission_rejections_total (queue_full, not the client's pd_prefill_queue_full),
// so the tenant and admission metrics can be joined on it; a budget's refusal is rate_limit_exceeded.
func rejection(err error, e *apierror.Error) string {
	switch {
	case errors.Is(err, tenant.ErrRateLimited):
		return e.Code
	case errors.Is(err, admission.ErrRejected):
		return admission.OutcomeOf(err).String()
	}
	return ""
}
