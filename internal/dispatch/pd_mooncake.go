package dispatch

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a vLLM PD request runs with the Mooncake connector (vLLM's
// examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py): both legs go at once
// (exchange.go), sharing a transfer id "xfer-<request id>".
//
//   - The prefill leg: the client's body with kv_transfer_params asking to keep the KV for a remote
//     decode under the transfer id, stream=false, max_tokens=1 (and max_completion_tokens=1),
//     stream_options removed, and the chosen data-parallel rank in X-data-parallel-rank.
//   - The decode leg: the client's body with kv_transfer_params naming the prefill's bootstrap address
//     (http://host:bootstrap port), the engine id of that rank (from the bootstrap server's /query:
//     ids change when an engine restarts, so they are kept briefly and dropped when a leg fails) and
//     the transfer id; the decode fetches the KV itself.
//
// The admission slot is released when the prefill's answer is read; either leg failing cancels the
// other (a decode whose KV never comes would wait for the connector's timeout). n > 1 and prompt
// batches never get here: the KV has one consumer (pd.go sends them to a decode worker alone).
type mooncakePD struct {
	x *Dispatcher

	mu  sync.Mutex
	ids map[string]engineIDs // by prefill URL
}

// engineIDs are a prefill engine's Mooncake engine ids by rank, as read at a time.
type engineIDs struct {
	ids  []string
	read time.Time
}

// engineIDsTTL bounds how long engine ids are reused: a restarted engine has new ones.
const engineIDsTTL = 30 * time.Second

func (m *mooncakePD) run(ctx context.Context, a *pdAttempt) (*Response, error) {
	x := m.x
	dw, err := x.decodeOf(a, worker.HandoffMooncake)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	engine := a.pw.Engine()
	addr := backend.MooncakeBootstrapAddr(engine.URL(), engine.BootstrapPort())
	ids, err := m.engineIDs(ctx, engine, addr)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, &UpstreamError{Worker: engine.URL(), Status: http.StatusBadGateway,
			Message: "the Mooncake prefill worker's bootstrap server did not list its engine ids"}
	}
	rank := max(a.pw.Rank(), 0)
	if rank >= len(ids) {
		a.slot.Release(admission.ReleaseFailed)
		return nil, &UpstreamError{Worker: engine.URL(), Status: http.StatusBadGateway,
			Message: "the Mooncake prefill worker lists " + strconv.Itoa(len(ids)) + " ranks, rank " + strconv.Itoa(rank) + " was chosen"}
	}
	xfer := body.MooncakeTransferID(a.r.RequestID)
	pbody, err := body.MooncakePrefillBody(a.br.Body, xfer)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot build the prefill request: "+err.Error())
	}
	dbody, err := body.MooncakeDecodeBody(a.br.Body, addr, ids[rank], xfer)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot build the decode request: "+err.Error())
	}
	legs := legBodies{prefill: pbody, decode: dbody,
		prefillHeader: http.Header{backend.HeaderDPRank: {strconv.Itoa(rank)}}}
	if dw.Rank() >= 0 {
		legs.decodeHeader = http.Header{backend.HeaderDPRank: {strconv.Itoa(dw.Rank())}}
	}
	resp, err := x.exchange(ctx, a.r, a.br, a.pw, dw, legs, a.slot, mergeNone)
	if err != nil && ctx.Err() == nil {
		m.forget(engine.URL()) // perhaps the engine restarted under new ids
	}
	return resp, err
}

// engineIDs returns the prefill engine's ids by rank, read from its bootstrap server at most
// engineIDsTTL ago.
func (m *mooncakePD) engineIDs(ctx context.Context, engine *worker.Worker, addr string) ([]string, error) {
	now := m.x.now()
	m.mu.Lock()
	e, ok := m.ids[engine.URL()]
	m.mu.Unlock()
	if ok && now.Sub(e.read) < engineIDsTTL {
		return e.ids, nil
	}
	ids, err := (&backend.Upstream{Client: m.x.d.HTTP, APIKey: engine.APIKey()}).MooncakeEngineIDs(ctx, addr)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.ids == nil {
		m.ids = map[string]engineIDs{}
	}
	m.ids[engine.URL()] = engineIDs{ids: ids, read: now}
	m.mu.Unlock()
	return ids, nil
}

func (m *mooncakePD) forget(url string) {
	m.mu.Lock()
	delete(m.ids, url)
	m.mu.Unlock()
}
