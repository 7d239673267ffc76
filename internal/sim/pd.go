package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
)

// Disaggregation handshakes (SGLang bootstrap rendezvous: rendezvous.go; vLLM Mooncake: mooncake.go)
// and vLLM NIXL KV transfer.

// receiveKV gets the KV of a decode-phase sample from its prefill engine. ok is false when the sample
// carries no handshake and must recompute its prompt.
func (e *Engine) receiveKV(ctx context.Context, sp *sampleSpec) (kvRecord, bool, error) {
	var rec kvRecord
	var err error
	switch {
	case sp.hs.bootstrap:
		rec, err = e.waitRoom(ctx, sp)
	case sp.hs.kv != nil && sp.hs.kv.DoRemotePrefill && e.cfg.mooncake():
		rec, err = e.pullMooncake(ctx, sp)
	case sp.hs.kv != nil && sp.hs.kv.DoRemotePrefill:
		rec, err = e.pullKV(ctx, sp.hs.kv)
	default:
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if rec.PromptHash != sp.prompt.hash || rec.PromptTokens != len(sp.prompt.ids) {
		e.stats.bootstrapMismatches.Add(1)
		// Real engines would decode garbage from a foreign KV cache; the simulator refuses it instead.
		return rec, false, abortError(errBootstrapMismatch, http.StatusInternalServerError,
			"KV transfer mismatch: the prefill computed a different prompt (%d tokens, hash %x) than this request's (%d tokens, hash %x)",
			rec.PromptTokens, rec.PromptHash, len(sp.prompt.ids), sp.prompt.hash)
	}
	if err := e.awaitTransfer(ctx, rec); err != nil {
		return rec, false, err
	}
	return rec, true, nil
}

// pullRequest is the body of POST /sim/kv/pull.
type pullRequest struct {
	RemoteEngineID  string   `json:"remote_engine_id"`
	RemoteBlockIDs  []uint32 `json:"remote_block_ids"`
	RemoteRequestID string   `json:"remote_request_id,omitempty"`
}

// pullKV fetches a vLLM-style KV record from the prefill engine named in the params (NIXL reads the
// prefill's blocks; here the prefill engine hands over the record). A failed transfer aborts the
// request.
func (e *Engine) pullKV(ctx context.Context, p *kvParams) (kvRecord, error) {
	failed := func(format string, args ...any) error {
		return abortError(errKVTransfer, http.StatusInternalServerError, "KV transfer from the prefill engine failed: "+format, args...)
	}
	if p.RemoteHost == nil || p.RemotePort == nil || len(p.RemoteBlockIDs) == 0 {
		return kvRecord{}, requestError("kv_transfer_params", "kv_transfer_params with do_remote_prefill need remote_host, remote_port and remote_block_ids")
	}
	pr := pullRequest{RemoteBlockIDs: p.RemoteBlockIDs, RemoteRequestID: p.RemoteRequestID}
	if p.RemoteEngineID != nil {
		pr.RemoteEngineID = *p.RemoteEngineID
	}
	body, _ := json.Marshal(pr)
	u := "http://" + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort)) + "/sim/kv/pull"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return kvRecord{}, failed("%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return kvRecord{}, ctx.Err()
		}
		return kvRecord{}, failed("%v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return kvRecord{}, failed("%v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return kvRecord{}, failed("prefill engine answered %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var rec kvRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return kvRecord{}, failed("bad KV record: %v", err)
	}
	return rec, nil
}

// publishRoom makes an SGLang prefill sample's KV available to the decode waiting on its room on the
// sample's rank.
func (e *Engine) publishRoom(sp *sampleSpec, cached int) {
	if rooms := e.ranks[sp.rank].rooms; rooms != nil {
		rooms.publish(sp.hs.room, kvRecord{PromptHash: sp.prompt.hash, PromptTokens: len(sp.prompt.ids), CachedTokens: cached, EngineID: e.id}.withTopology(e.cfg.Topology))
	}
}

// offerKV keeps a vLLM prefill sample's KV for its decode and returns the kv_transfer_params of the
// response, or nil. The NIXL connector returns params only when the request finished because of the
// length cap (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py request_finished:
// status != FINISHED_LENGTH_CAPPED frees the blocks and returns None); an EOS or a stop string as the
// one token, or the omit fault, leave the decode to recompute the prompt.
func (e *Engine) offerKV(sp *sampleSpec, res *sampleResult, rf *requestFaults) *kvParams {
	if res.finish != "length" || rf.omitKV {
		e.stats.kvParamsOmitted.Add(1)
		return nil
	}
	id := e.ranks[sp.rank].engineID
	rec := kvRecord{PromptHash: sp.prompt.hash, PromptTokens: len(sp.prompt.ids), CachedTokens: res.cachedTokens, EngineID: id}.withTopology(e.cfg.Topology)
	n := uint32(max(1, (len(sp.prompt.ids)+e.cfg.BlockSize-1)/e.cfg.BlockSize))
	first := e.nextBlock.Add(n) - n + 1
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = first + uint32(i)
	}
	e.kvStore.publish(uint64(first), rec)
	host, port, tp := e.cfg.Host, e.Port(), 1
	// The params of request_finished (tp_size included; remote_request_id is the simulator's). A DP rank
	// is its own engine: remote_engine_id names the rank.
	return &kvParams{
		DoRemotePrefill: true,
		RemoteEngineID:  &id,
		RemoteBlockIDs:  ids,
		RemoteHost:      &host,
		RemotePort:      &port,
		RemoteRequestID: id + "-" + strconv.FormatUint(uint64(first), 10),
		TPSize:          &tp,
	}
}

// handleKVPull serves POST /sim/kv/pull: a decode engine takes a vLLM-style KV record.
func (e *Engine) handleKVPull(w http.ResponseWriter, r *http.Request) {
	var pr pullRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&pr); err != nil {
		writeSimError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	if _, ok := e.rankByEngineID(pr.RemoteEngineID); pr.RemoteEngineID != "" && !ok {
		writeSimError(w, http.StatusNotFound, "remote_engine_id "+pr.RemoteEngineID+" is not this engine ("+e.id+")")
		return
	}
	if len(pr.RemoteBlockIDs) == 0 {
		writeSimError(w, http.StatusBadRequest, "remote_block_ids missing")
		return
	}
	// The blocks must be the named rank's: another rank's blocks are another engine's memory.
	rec, ok := e.kvStore.takeIf(uint64(pr.RemoteBlockIDs[0]), func(rec kvRecord) bool {
		return pr.RemoteEngineID == "" || rec.EngineID == pr.RemoteEngineID
	})
	if !ok {
		writeSimError(w, http.StatusNotFound, "no KV for these blocks (never computed, already pulled or expired)")
		return
	}
	writeJSON(w, http.StatusOK, rec)
}
