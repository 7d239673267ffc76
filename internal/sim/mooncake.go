package sim

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// vLLM's Mooncake connector (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py,
// mooncake_utils.py; the reference proxy is examples/disaggregated/mooncake_connector/
// mooncake_connector_proxy.py). The proxy sends both legs at once with the same transfer_id:
//
//   - prefill: kv_transfer_params {do_remote_decode: true, do_remote_prefill: false, transfer_id},
//     header X-data-parallel-rank. When the request finished by the length cap (request_finished:
//     FINISHED_LENGTH_CAPPED) its KV is kept under (rank, transfer_id) until a decode pulls it or it
//     expires; otherwise nothing is kept. The response's kv_transfer_params is null either way.
//   - decode: {do_remote_decode: false, do_remote_prefill: true, remote_bootstrap_addr, remote_engine_id,
//     transfer_id}. It asks the bootstrap server (GET remote_bootstrap_addr/query) which worker serves
//     remote_engine_id, then pulls the transfer there. A pull that arrives before the prefill finished
//     waits for it (send_kv_to_decode waits on the transfer's ready event) up to
//     VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, then fails ("Timeout waiting for P side ready."). An engine id
//     the bootstrap server does not know fails at once ("remote engine_id ... not found from bootstrap
//     server ..."). A failed load fails the request under vLLM's default kv_load_failure_policy "fail":
//     finish_reason "error", which the API answers with 500 "Internal server error"
//     (entrypoints/.../serving.py _raise_if_error).
//
// The real side channel is ZMQ plus RDMA writes from the prefill; here the decode pulls the KV record
// over HTTP from the prefill's bootstrap listener (POST /sim/mooncake/pull), addressed by the rank the
// bootstrap server lists the engine id under.

// mooncakeTimeoutMsg is vLLM's reason for a pull whose KV never became ready on the prefill.
const mooncakeTimeoutMsg = "Timeout waiting for P side ready."

// errTransferTaken: another pull already took the transfer's KV.
var errTransferTaken = errors.New("transfer already pulled")

// transferStore keeps a Mooncake prefill rank's computed KV by transfer_id until one decode pulls it. A
// pull may come first and wait; published records nobody pulls expire after ttl, and at most
// maxRecords are kept. Expiry is swept on publish and pull: no goroutine.
type transferStore struct {
	mu         sync.Mutex
	ttl        time.Duration
	maxRecords int
	entries    map[string]*transfer
	published  list.List // of *transfer published and not pulled, oldest first
	expired    int64
}

type transfer struct {
	id        string
	ready     chan struct{} // closed when published
	published bool
	taken     bool
	waiters   int
	rec       kvRecord
	at        time.Time
	elem      *list.Element
}

func newTransferStore(ttl time.Duration, maxRecords int) *transferStore {
	return &transferStore{ttl: ttl, maxRecords: maxRecords, entries: make(map[string]*transfer)}
}

func (s *transferStore) entryLocked(id string) *transfer {
	t, ok := s.entries[id]
	if !ok {
		t = &transfer{id: id, ready: make(chan struct{})}
		s.entries[id] = t
	}
	return t
}

func (s *transferStore) dropLocked(t *transfer) {
	if t.elem != nil {
		s.published.Remove(t.elem)
		t.elem = nil
	}
	if s.entries[t.id] == t {
		delete(s.entries, t.id)
	}
}

func (s *transferStore) sweepLocked(now time.Time) {
	for f := s.published.Front(); f != nil && now.Sub(f.Value.(*transfer).at) >= s.ttl; f = s.published.Front() {
		s.dropLocked(f.Value.(*transfer))
		s.expired++
	}
}

// publish keeps a finished prefill's KV for its decode; publishing an id twice replaces the record.
func (s *transferStore) publish(id string, rec kvRecord) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	t := s.entryLocked(id)
	t.rec, t.at = rec, now
	if t.published {
		s.published.MoveToBack(t.elem)
		return
	}
	t.published = true
	t.elem = s.published.PushBack(t)
	close(t.ready)
	for s.published.Len() > s.maxRecords {
		s.dropLocked(s.published.Front().Value.(*transfer))
		s.expired++
	}
}

// discard forgets a transfer whose prefill finished without KV to send (reqs_not_processed): a decode
// already waiting for it keeps waiting until its timeout, as in vLLM.
func (s *transferStore) discard(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.entries[id]; ok && !t.published {
		delete(s.entries, id)
	}
}

// pull takes a transfer's KV, waiting for its publication until ctx ends; waited reports whether the
// pull came before the KV was ready.
func (s *transferStore) pull(ctx context.Context, id string) (rec kvRecord, waited bool, err error) {
	s.mu.Lock()
	s.sweepLocked(time.Now())
	t := s.entryLocked(id)
	if t.published {
		defer s.mu.Unlock()
		t.taken = true
		s.dropLocked(t)
		return t.rec, false, nil
	}
	t.waiters++
	s.mu.Unlock()
	select {
	case <-t.ready:
		s.mu.Lock()
		defer s.mu.Unlock()
		t.waiters--
		if t.taken {
			return kvRecord{}, true, errTransferTaken
		}
		t.taken = true
		s.dropLocked(t)
		return t.rec, true, nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		t.waiters--
		if !t.published && t.waiters == 0 && s.entries[id] == t {
			delete(s.entries, id)
		}
		return kvRecord{}, true, ctx.Err()
	}
}

// size is the number of published records not pulled yet.
func (s *transferStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published.Len()
}

// keepMooncake is a Mooncake prefill sample's request_finished: keep the KV under its transfer_id when the
// length cap ended it (and the omit fault is off), else keep nothing. The response carries no params.
func (e *Engine) keepMooncake(sp *sampleSpec, res *sampleResult, rf *requestFaults) {
	id := sp.hs.kv.TransferID
	r := e.ranks[sp.rank]
	switch {
	case id == "":
		e.logger.Warn("Missing transfer_id in kv_transfer_params from router!", "rid", sp.rid)
		e.stats.mooncakeNotKept.Add(1)
	case res.finish != "length" || rf.omitKV:
		r.xfers.discard(id)
		e.stats.mooncakeNotKept.Add(1)
	default:
		r.xfers.publish(id, kvRecord{PromptHash: sp.prompt.hash, PromptTokens: len(sp.prompt.ids), CachedTokens: res.cachedTokens, EngineID: r.engineID}.withTopology(e.cfg.Topology))
		e.stats.mooncakeKept.Add(1)
	}
}

// mooncakeEngineEntry is one DP rank in the bootstrap server's GET /query answer
// (mooncake_utils.py EngineEntry): {"engine_id", "worker_addr": {tp_rank: {pp_rank: addr}}}.
type mooncakeEngineEntry struct {
	EngineID   string                       `json:"engine_id"`
	WorkerAddr map[string]map[string]string `json:"worker_addr"`
}

// mooncakeQuery is GET /query: every DP rank's entry, keyed by the rank.
func (e *Engine) mooncakeQuery() map[string]mooncakeEngineEntry {
	addr := "tcp://" + net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.BootstrapPort()))
	out := make(map[string]mooncakeEngineEntry, len(e.ranks))
	for _, r := range e.ranks {
		out[strconv.Itoa(r.index)] = mooncakeEngineEntry{EngineID: r.engineID, WorkerAddr: map[string]map[string]string{"0": {"0": addr}}}
	}
	return out
}

// mooncakePullRequest is the body of POST /sim/mooncake/pull, the simulator's side channel.
type mooncakePullRequest struct {
	DPRank     int    `json:"dp_rank"`
	TransferID string `json:"transfer_id"`
	TimeoutMS  int64  `json:"timeout_ms"`
}

// mooncakeBootstrapHandler serves a Mooncake prefill's bootstrap server: GET /query (the real route) and
// POST /sim/mooncake/pull (a decode pulling a transfer, long-polling until its prefill finished).
func (e *Engine) mooncakeBootstrapHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /query", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, e.mooncakeQuery()) })
	mux.HandleFunc("POST /sim/mooncake/pull", func(w http.ResponseWriter, r *http.Request) {
		var pr mooncakePullRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&pr); err != nil {
			writeSimError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
			return
		}
		if pr.DPRank < 0 || pr.DPRank >= len(e.ranks) || pr.TransferID == "" {
			writeSimError(w, http.StatusBadRequest, fmt.Sprintf("want a dp_rank in [0, %d) and a transfer_id", len(e.ranks)))
			return
		}
		wait := e.cfg.BootstrapTimeout
		if pr.TimeoutMS > 0 {
			wait = min(wait, time.Duration(pr.TimeoutMS)*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		rec, waited, err := e.ranks[pr.DPRank].xfers.pull(ctx, pr.TransferID)
		if waited {
			e.stats.mooncakeWaits.Add(1)
		}
		switch {
		case err == nil:
			e.stats.mooncakeSent.Add(1)
			writeJSON(w, http.StatusOK, rec)
		case r.Context().Err() != nil:
			// The decode went away.
		default:
			e.stats.mooncakePullTimeouts.Add(1)
			writeSimError(w, http.StatusRequestTimeout, mooncakeTimeoutMsg)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = jsonContentType
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"Not Found"}`) // a FastAPI app, like the other vLLM routes
	})
	return mux
}

// mooncakeAgent is where a decode pulls a remote engine's KV from.
type mooncakeAgent struct {
	rank    int
	pullURL string
}

// mooncakeAgents caches what decodes learnt from prefills' bootstrap servers (the connector's
// _remote_agents): bootstrap address -> engine id -> agent.
type mooncakeAgents struct {
	mu     sync.Mutex
	byAddr map[string]map[string]mooncakeAgent
}

func (a *mooncakeAgents) get(addr, engineID string) (mooncakeAgent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ag, ok := a.byAddr[addr][engineID]
	return ag, ok
}

func (a *mooncakeAgents) set(addr string, m map[string]mooncakeAgent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byAddr == nil {
		a.byAddr = make(map[string]map[string]mooncakeAgent)
	}
	a.byAddr[addr] = m
}

func (a *mooncakeAgents) forget(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byAddr, addr)
}

// lookupMooncakeAgent resolves remote_engine_id on the bootstrap server at addr, querying it again when
// the engine id is not known yet (handle_new_engine_id).
func (e *Engine) lookupMooncakeAgent(ctx context.Context, addr, engineID string) (mooncakeAgent, error) {
	if ag, ok := e.mcAgents.get(addr, engineID); ok {
		return ag, nil
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(qctx, http.MethodGet, strings.TrimSuffix(addr, "/")+"/query", nil)
	if err != nil {
		return mooncakeAgent{}, fmt.Errorf("failed to connect to bootstrap server %s: %w", addr, err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return mooncakeAgent{}, fmt.Errorf("failed to connect to bootstrap server %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return mooncakeAgent{}, fmt.Errorf("failed to connect to bootstrap server %s: status %d %s", addr, resp.StatusCode, bytes.TrimSpace(body))
	}
	var entries map[string]mooncakeEngineEntry
	if err := json.Unmarshal(body, &entries); err != nil {
		return mooncakeAgent{}, fmt.Errorf("failed to connect to bootstrap server %s: %w", addr, err)
	}
	agents := make(map[string]mooncakeAgent, len(entries))
	for k, ent := range entries {
		rank, err := strconv.Atoi(k)
		worker := ent.WorkerAddr["0"]["0"]
		if err != nil || !strings.HasPrefix(worker, "tcp://") {
			continue
		}
		agents[ent.EngineID] = mooncakeAgent{rank: rank, pullURL: "http://" + strings.TrimPrefix(worker, "tcp://") + "/sim/mooncake/pull"}
	}
	e.mcAgents.set(addr, agents)
	ag, ok := agents[engineID]
	if !ok {
		return mooncakeAgent{}, fmt.Errorf("remote engine_id %s not found from bootstrap server %s", engineID, addr)
	}
	return ag, nil
}

// errMooncakeLoad is what a vLLM decode answers when its KV load failed (kv_load_failure_policy "fail").
func errMooncakeLoad() error {
	return abortError(errKVTransfer, http.StatusInternalServerError, "Internal server error")
}

// pullMooncake is a Mooncake decode's KV load: resolve the prefill rank from remote_engine_id, then pull
// the transfer from it, waiting for the prefill to finish.
func (e *Engine) pullMooncake(ctx context.Context, sp *sampleSpec) (kvRecord, error) {
	p := sp.hs.kv
	if p.RemoteEngineID == nil || p.RemoteBootstrapAddr == nil || p.TransferID == "" {
		// vLLM logs "Got invalid KVTransferParams" and never loads the KV; the simulator refuses instead.
		return kvRecord{}, requestError("kv_transfer_params", "kv_transfer_params with do_remote_prefill need remote_engine_id, remote_bootstrap_addr and transfer_id (Mooncake connector)")
	}
	e.stats.mooncakePulls.Add(1)
	e.stats.mooncakePulling.Add(1)
	defer e.stats.mooncakePulling.Add(-1)
	addr := *p.RemoteBootstrapAddr
	failed := func(reason string) error {
		e.stats.mooncakeFailures.Add(1)
		e.logger.Info("pulling kv_caches failed", "rid", sp.rid, "transfer_id", p.TransferID, "reason", reason)
		return errMooncakeLoad()
	}
	if u, err := url.Parse(addr); err != nil || u.Scheme != "http" || u.Host == "" {
		return kvRecord{}, failed(fmt.Sprintf("failed to connect to bootstrap server %s: not an http://host:port address", addr))
	}
	ag, err := e.lookupMooncakeAgent(ctx, addr, *p.RemoteEngineID)
	if err != nil {
		if ctx.Err() != nil {
			return kvRecord{}, ctx.Err()
		}
		return kvRecord{}, failed(err.Error())
	}
	timeout := e.cfg.BootstrapTimeout
	pctx, cancel := context.WithTimeout(ctx, timeout+time.Second) // the prefill answers 408 first
	defer cancel()
	body, _ := json.Marshal(mooncakePullRequest{DPRank: ag.rank, TransferID: p.TransferID, TimeoutMS: timeout.Milliseconds()})
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, ag.pullURL, bytes.NewReader(body))
	if err != nil {
		return kvRecord{}, failed(err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	timedOut := func() error {
		e.stats.mooncakeTimeouts.Add(1)
		e.logger.Info("pulling kv_caches failed", "rid", sp.rid, "transfer_id", p.TransferID, "reason", mooncakeTimeoutMsg)
		return errMooncakeLoad()
	}
	resp, err := e.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return kvRecord{}, ctx.Err()
		case pctx.Err() != nil:
			return kvRecord{}, timedOut()
		}
		e.mcAgents.forget(addr) // a prefill that went away may come back with other engine ids
		return kvRecord{}, failed("transfer failed: " + err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return kvRecord{}, failed("transfer failed: " + err.Error())
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusRequestTimeout:
		return kvRecord{}, timedOut()
	default:
		return kvRecord{}, failed(fmt.Sprintf("transfer failed: status %d %s", resp.StatusCode, bytes.TrimSpace(b)))
	}
	var rec kvRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return kvRecord{}, failed("transfer failed: " + err.Error())
	}
	e.stats.mooncakeTransfers.Add(1)
	return rec, nil
}
