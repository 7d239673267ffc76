package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// UpstreamError is a worker's error response.
type UpstreamError struct {
	Worker     string
	Status     int
	Body       []byte
	Message    string
	RetryAfter string
	// ClientAuth is true when the leg carried the client's own Authorization (or none), not a worker
	// API key of the gateway's: a 401 or 403 then judges the client's credentials.
	ClientAuth bool
}

func (e *UpstreamError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("worker %s answered %d: %s", e.Worker, e.Status, truncate(e.Body, 512))
}

// maxEngineMessage bounds an engine message relayed to a client.
const maxEngineMessage = 1024

// APIError relays the engine's answer so that it keeps its meaning: a client error (4xx: a prompt
// longer than the context, a bad sampling parameter) reaches the client with its status and the
// engine's message in OpenAI's shape — the worker's URL and host taken out — so the client can fix
// its request. An engine refusing credentials (401, 403) judged the client's when sluice forwarded
// them (no worker API key configured): that answer is relayed too, as the Rust gateway does
// (smg-project/smg e2e test_router_api_key_enforcement). Refusing the gateway's own key is not the
// client's fault: 502. Server errors keep the engine's status (the retry loop has already tried
// elsewhere). The engine's Retry-After is kept.
func (e *UpstreamError) APIError() *apierror.Error {
	auth := e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	if auth && !e.ClientAuth {
		return apierror.New(http.StatusBadGateway, apierror.CodeUpstream,
			"upstream worker refused the gateway's credentials (HTTP "+strconv.Itoa(e.Status)+")", e)
	}
	msg := e.Message
	if msg == "" {
		msg = "upstream worker answered HTTP " + strconv.Itoa(e.Status)
	}
	ae := apierror.FromUpstream(e.Status, e.Body, msg, e)
	ae.Message = scrubWorker(ae.Message, e.Worker)
	if auth && ae.Code == apierror.CodeUpstream {
		ae.Code = apierror.CodeUnauthorized
		if e.Status == http.StatusForbidden {
			ae.Code = apierror.CodePermissionDenied
		}
	}
	if secs, err := strconv.Atoi(e.RetryAfter); err == nil && secs > 0 {
		ae.RetryAfter = time.Duration(secs) * time.Second
	}
	return ae
}

// scrubWorker removes the worker's URL, host:port and host from an engine message and bounds its
// length: clients must not learn the addresses behind the gateway.
func scrubWorker(msg, workerURL string) string {
	if u, err := url.Parse(workerURL); err == nil && u.Host != "" {
		for _, s := range []string{workerURL, u.Host, u.Hostname()} {
			if len(s) >= 3 {
				msg = strings.ReplaceAll(msg, s, "<worker>")
			}
		}
	}
	if len(msg) > maxEngineMessage {
		msg = strings.ToValidUTF8(msg[:maxEngineMessage], "") + "..."
	}
	return msg
}

// TransportError is a failure to reach a worker or to read its response.
type TransportError struct {
	Worker string
	Err    error
}

func (e *TransportError) Error() string { return "worker " + e.Worker + ": " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// APIError maps a transport failure to 502 (504 when the worker timed out).
func (e *TransportError) APIError() *apierror.Error {
	if isTimeout(e.Err) {
		return apierror.New(http.StatusGatewayTimeout, apierror.CodeUpstream, "upstream worker timed out", e)
	}
	return apierror.New(http.StatusBadGateway, apierror.CodeUpstream, "upstream worker unreachable or failed", e)
}

// isTimeout reports a network timeout (a net.Error that says so).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// isRetryable reports whether another attempt may succeed: retryable statuses (never a client
// error) and transport failures that are not our own cancellation.
func isRetryable(err error) bool {
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return backend.IsRetryableStatus(ue.Status)
	}
	var te *TransportError
	if errors.As(err, &te) {
		return !errors.Is(te.Err, context.Canceled)
	}
	return false
}

// isClientError reports an engine's answer that the request itself is wrong (4xx other than the
// retryable 408 and 429 and the refusal of the gateway's own credentials): the other leg's failure is
// only its echo.
func isClientError(err error) bool {
	var ue *UpstreamError
	return errors.As(err, &ue) && ue.Status >= 400 && ue.Status < 500 && !backend.IsRetryableStatus(ue.Status) &&
		(ue.ClientAuth || (ue.Status != http.StatusUnauthorized && ue.Status != http.StatusForbidden))
}

func classifyRequestError(err error) error {
	var re *body.RequestError
	if errors.As(err, &re) {
		if re.Malformed {
			return apierror.New(http.StatusBadRequest, apierror.CodeInvalidJSON, re.Message, err)
		}
		return apierror.InvalidRequest(re.Param, re.Message)
	}
	return apierror.InvalidRequest("", err.Error())
}
